package e2e

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A video task runs on a real agent with the ffmpeg runner: the scheduler
// ends up with the MP4 as the task's result object, and its link serves a
// playable 5-second H.264 video of the requested size.
func TestVideoTaskCompletesWithAnMP4(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Fatalf("ffmpeg is required (apt-get install -y ffmpeg; .ci/run installs it): %v", err)
	}
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	id := w.submit(key, map[string]any{"name": "clip", "type": "video", "timeout": 120, "video": map[string]any{
		"model": "wan2.2-t2v", "type": "text_to_video", "prompt": "a paper boat on a river, 纸船",
		"resolution": "480P", "width": 320, "height": 180, "duration": 5, "frame_num": 81, "seed": 3, "watermark": true,
	}})
	done := w.waitStatus(key, id, 60*time.Second, "completed", "failed")
	if done["status"] != "completed" || done["progress"] != float64(100) {
		t.Fatalf("task = %v", done)
	}
	code, res, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	if code != 200 || res["storage_type"] != "s3" {
		t.Fatalf("result = %d %v", code, res)
	}
	resp, err := http.Get(res["presigned_url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("download: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	path := filepath.Join(t.TempDir(), "clip.mp4")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,pix_fmt:format=duration", "-of", "csv=p=0", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 || lines[0] != "h264,320,180,yuv420p" || !strings.HasPrefix(lines[1], "5.0") {
		t.Fatalf("ffprobe says %q, want h264 320x180 yuv420p over 5 s", out)
	}
}
