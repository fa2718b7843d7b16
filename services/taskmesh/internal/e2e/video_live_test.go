package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The video API end to end (docs/api/video.md#live-streams): a client
// submits a generation, follows it over the WebSocket (QUEUED → RUNNING →
// progress → SUCCEEDED), then downloads the video its GET answer links to —
// a playable 5-second MP4 of the requested resolution, rendered by a real
// agent's ffmpeg runner after quota admission.
func TestVideoGenerationLiveOverWebSocketToAPlayableMP4(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Fatalf("ffmpeg is required (apt-get install -y ffmpeg; .ci/run installs it): %v", err)
	}
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	code, body, _ := w.call("POST", "/v1/video/generations", key, map[string]any{"model": "wan2.2-t2v",
		"input": map[string]any{"prompt": "一只纸船在河上漂流"}, "parameters": map[string]any{"resolution": "480P", "prompt_extend": false}})
	out, _ := body["output"].(map[string]any)
	if code != 200 || out["task_status"] != "QUEUED" {
		t.Fatalf("submit = %d %v", code, body)
	}
	id := out["task_id"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.s.HTTPURL, "http")+"/v1/video/generations/"+id+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	var statuses []string
	var progress []float64
	for {
		_, raw, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				break
			}
			t.Fatalf("read after %v: %v", statuses, err)
		}
		var f struct {
			Event string         `json:"event"`
			Data  map[string]any `json:"data"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("frame %s: %v", raw, err)
		}
		s := f.Data["task_status"].(string)
		if f.Data["taskStatus"] != s || f.Data["task_id"] != id {
			t.Fatalf("frame = %s", raw)
		}
		if f.Event == "progress" {
			progress = append(progress, f.Data["taskProgress"].(float64))
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != s {
			statuses = append(statuses, s)
		}
	}
	if strings.Join(statuses, " → ") != "QUEUED → RUNNING → SUCCEEDED" {
		t.Fatalf("statuses seen = %v", statuses)
	}
	if len(progress) == 0 {
		t.Fatalf("no progress frame between RUNNING and SUCCEEDED")
	}

	code, got, _ := w.call("GET", "/v1/video/generations/"+id, key, nil)
	data, _ := got["data"].(map[string]any)
	in, _ := data["taskInput"].(map[string]any)
	url, _ := in["video_url"].(string)
	if code != 200 || data["task_status"] != "SUCCEEDED" || url == "" {
		t.Fatalf("GET = %d %v", code, got)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	mp4, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("download: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	path := filepath.Join(t.TempDir(), "generation.mp4")
	if err := os.WriteFile(path, mp4, 0o600); err != nil {
		t.Fatal(err)
	}
	probe, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height:format=duration", "-of", "csv=p=0", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v %s", err, probe)
	}
	if f := strings.Fields(string(probe)); len(f) != 2 || f[0] != "h264,832,480" || !strings.HasPrefix(f[1], "5.0") {
		t.Fatalf("ffprobe says %q, want h264 832x480 over 5 s", probe)
	}
}
