package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/proto"
)

func needFFmpeg(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (apt-get install -y ffmpeg; .ci/run installs it): %v", tool, err)
		}
	}
}

func videoTask(typ, imageURL string) *taskv1.Task {
	return &taskv1.Task{Name: "clip", Type: "video", Timeout: 120, Video: &taskv1.VideoParams{
		Model: "wan2.2-t2v", Type: typ, Prompt: "a lighthouse at dusk, 海浪", Resolution: "480P",
		ImageUrl: imageURL, Width: 160, Height: 96, Duration: 5, FrameNum: 81, Seed: 7, Watermark: true,
	}}
}

// probeDuration returns the duration and size of an MP4 held in memory.
func probeMP4(t *testing.T, body []byte) (dur float64, size string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "v.mp4")
	if err := os.WriteFile(p, body, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height:format=duration", "-of", "default=nw=1", p).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		kv[k] = v
	}
	if kv["codec_name"] != "h264" {
		t.Errorf("codec %q, want h264", kv["codec_name"])
	}
	dur, _ = strconv.ParseFloat(kv["duration"], 64)
	return dur, kv["width"] + "x" + kv["height"]
}

func TestVideoTaskUploadsTheMP4(t *testing.T) {
	needFFmpeg(t)
	store := &objectStore{}
	srv := httptest.NewServer(store)
	defer srv.Close()
	h := newHarness(t, func(c *Config) { c.VideoRealtime = true })
	h.fake.SetUploadURL(srv.URL)
	id := h.fake.Add(videoTask("text_to_video", ""))[0]
	h.start()

	c := h.fake.WaitComplete(t, id, 60*time.Second)
	claims := h.fake.Calls("ClaimTasks")
	if len(claims) == 0 || !slices.Contains(claims[0].Req.(*taskv1.ClaimTasksRequest).GetTypes(), "video") {
		t.Fatalf("the agent does not claim video tasks with ffmpeg installed")
	}
	if c.GetExitCode() != 0 || c.GetError() != "" || c.GetResultObject().GetKey() == "" {
		t.Fatalf("completion %v", c)
	}
	ups := h.fake.Calls("CreateResultUpload")
	if len(ups) != 1 {
		t.Fatalf("%d upload requests, want 1", len(ups))
	}
	up := ups[0].Req.(*taskv1.CreateResultUploadRequest)
	puts := store.all()
	if len(puts) != 1 {
		t.Fatalf("%d PUTs, want 1", len(puts))
	}
	body := puts[0].body
	sum := sha256.Sum256(body)
	if up.GetContentType() != "video/mp4" || puts[0].header.Get("Content-Type") != "video/mp4" ||
		up.GetSizeBytes() != int64(len(body)) || up.GetSha256() != hex.EncodeToString(sum[:]) ||
		c.GetResultObject().GetSizeBytes() != int64(len(body)) || c.GetResultObject().GetSha256() != up.GetSha256() {
		t.Errorf("upload %v / completion %v do not describe the %d-byte body", up, c.GetResultObject(), len(body))
	}
	if dur, size := probeMP4(t, body); dur < 4.9 || dur > 5.1 || size != "160x96" {
		t.Errorf("video is %s over %.2fs, want 160x96 over 5s", size, dur)
	}

	// Progress went up step by step while the video rendered.
	var seen []int32
	for _, call := range h.fake.Calls("ReportTaskProgress") {
		seen = append(seen, call.Req.(*taskv1.ReportTaskProgressRequest).GetProgress())
	}
	if len(seen) < 3 {
		t.Fatalf("progress reports %v: want several while a 5 s render runs", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Fatalf("progress went back: %v", seen)
		}
	}
	// How far the last report gets depends on how the render's pace falls
	// against the once-a-second reports (the completion, not a report,
	// carries the end): a loaded machine reported [1 5 27 48]. What must
	// hold is that progress rose over the render, not stood still.
	if seen[len(seen)-1] <= seen[0] {
		t.Errorf("progress reports %v did not rise while the video rendered", seen)
	}
	// The run directory goes once the result is delivered.
	row := h.row(id)
	if row.Status != journal.StatusCompleted || !row.Synced {
		t.Errorf("journal row %s synced=%v", row.Status, row.Synced)
	}
	if _, err := os.Stat(row.RunDir); !os.IsNotExist(err) {
		t.Errorf("run dir %s still exists after delivery (%v)", row.RunDir, err)
	}
}

func TestVideoTaskWithAMissingImageFails(t *testing.T) {
	needFFmpeg(t)
	img := httptest.NewServer(http.NotFoundHandler())
	defer img.Close()
	h := newHarness(t, nil)
	id := h.fake.Add(videoTask("image_to_video", img.URL+"/first.png?X-Signature=SECRET"))[0]
	h.start()
	c := h.fake.WaitComplete(t, id, 30*time.Second)
	if c.GetExitCode() != 1 || !strings.Contains(c.GetError(), "answered 404 Not Found") || strings.Contains(c.GetError(), "SECRET") {
		t.Errorf("completion exit %d error %q: want exit 1 and the download's reason without the signature", c.GetExitCode(), c.GetError())
	}
	if n := len(h.fake.Calls("CreateResultUpload")); n != 0 || c.GetResultObject() != nil {
		t.Errorf("a failed render uploaded a result (%d uploads)", n)
	}
}

func TestVideoTaskWithoutParametersFails(t *testing.T) {
	needFFmpeg(t)
	h := newHarness(t, nil)
	id := h.fake.Add(&taskv1.Task{Name: "clip", Type: "video", Timeout: 60})[0]
	h.start()
	c := h.fake.WaitComplete(t, id, 30*time.Second)
	if c.GetExitCode() != -1 || c.GetError() != "video task without video parameters" {
		t.Errorf("completion exit %d error %q", c.GetExitCode(), c.GetError())
	}
}

func TestCancelStopsTheVideoRender(t *testing.T) {
	needFFmpeg(t)
	h := newHarness(t, func(c *Config) { c.VideoRealtime = true })
	task := videoTask("text_to_video", "")
	task.Video.Duration, task.Video.FrameNum = 30, 480
	id := h.fake.Add(task)[0]
	h.start()
	row := h.waitRow(id, 20*time.Second, "render under way", func(r journal.Task) bool {
		return r.PID > 0 && r.Progress >= 2
	})
	h.fake.StopOnHeartbeat(id, "cancelled", 2)
	row = h.waitFinal(id, 20*time.Second)
	if row.Status != journal.StatusCancelled {
		t.Fatalf("status %s, want cancelled", row.Status)
	}
	if !groupGone(row.PID) {
		t.Errorf("the render's process group %d is still alive", row.PID)
	}
	if n := len(h.fake.Calls("CreateResultUpload")); n != 0 {
		t.Errorf("a cancelled render uploaded a result (%d uploads)", n)
	}
}

// A video rendered while the server is unreachable waits in the journal
// with its file, and is uploaded and reported once the server is back.
func TestVideoResultIsDeliveredAfterAnOutage(t *testing.T) {
	needFFmpeg(t)
	store := &objectStore{}
	srv := httptest.NewServer(store)
	defer srv.Close()
	h := newHarness(t, nil)
	h.fake.SetUploadURL(srv.URL)
	h.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "CreateResultUpload" || method == "CompleteTask" {
			return rpcerr.New(rpcerr.Internal, "object store unavailable")
		}
		return nil
	})
	id := h.fake.Add(videoTask("text_to_video", ""))[0]
	h.start()
	row := h.waitRow(id, 30*time.Second, "render finished, not delivered", func(r journal.Task) bool {
		return r.Status == journal.StatusCompleted && r.SyncAttempts > 0
	})
	if row.Synced {
		t.Fatal("outcome marked synced while the server refused it")
	}
	if _, err := os.Stat(filepath.Join(row.RunDir, "video.mp4")); err != nil {
		t.Fatalf("the rendered video was not kept for later delivery: %v", err)
	}
	h.fake.SetFail(nil)
	c := h.fake.WaitComplete(t, id, 60*time.Second)
	if c.GetResultObject().GetKey() == "" || len(store.all()) != 1 || !bytes.HasPrefix(store.all()[0].body[4:], []byte("ftyp")) {
		t.Errorf("after the outage: completion %v, %d PUTs", c.GetResultObject(), len(store.all()))
	}
}

func TestVideoConfiguration(t *testing.T) {
	t.Run("video listed without ffmpeg", func(t *testing.T) {
		h := newHarness(t, func(c *Config) {
			c.Types = []string{"video"}
			c.VideoFFmpeg = "/nonexistent/ffmpeg"
		})
		_, err := New(context.Background(), h.cfg)
		if err == nil || !strings.Contains(err.Error(), "task type video: ffmpeg not found") {
			t.Fatalf("New = %v, want the missing ffmpeg reported", err)
		}
	})
	t.Run("default types without ffmpeg", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.VideoFFmpeg = "/nonexistent/ffmpeg" })
		h.start()
		leasetest.WaitFor(t, 10*time.Second, "a claim", func() bool { return len(h.fake.Calls("ClaimTasks")) > 0 })
		types := h.fake.Calls("ClaimTasks")[0].Req.(*taskv1.ClaimTasksRequest).GetTypes()
		if slices.Contains(types, "video") {
			t.Errorf("claims %v without ffmpeg", types)
		}
		if !strings.Contains(h.logs.String(), "video tasks are not claimed: ffmpeg is missing") {
			t.Errorf("missing ffmpeg not logged:\n%s", h.logs.String())
		}
	})
	t.Run("a font that does not exist", func(t *testing.T) {
		needFFmpeg(t)
		h := newHarness(t, func(c *Config) { c.VideoFont = "/nonexistent/font.ttf" })
		if _, err := New(context.Background(), h.cfg); err == nil || !strings.Contains(err.Error(), "video font") {
			t.Fatalf("New = %v, want the font reported", err)
		}
	})
}

// A rendered video that disappears before it could be uploaded fails the
// attempt instead of holding up every later outcome.
func TestLostVideoFailsTheAttempt(t *testing.T) {
	needFFmpeg(t)
	store := &objectStore{}
	srv := httptest.NewServer(store)
	defer srv.Close()
	h := newHarness(t, nil)
	h.fake.SetUploadURL(srv.URL)
	h.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "CreateResultUpload" || method == "CompleteTask" {
			return rpcerr.New(rpcerr.Internal, "object store unavailable")
		}
		return nil
	})
	lost := h.fake.Add(videoTask("text_to_video", ""))[0]
	h.start()
	row := h.waitRow(lost, 30*time.Second, "render finished, not delivered", func(r journal.Task) bool {
		return r.Status == journal.StatusCompleted && r.SyncAttempts > 0
	})
	if err := os.Remove(filepath.Join(row.RunDir, "video.mp4")); err != nil {
		t.Fatal(err)
	}
	next := h.fake.Add(shell("echo", "after"))[0]
	h.fake.SetFail(nil)
	c := h.fake.WaitComplete(t, lost, 30*time.Second)
	if c.GetExitCode() != -1 || !strings.Contains(c.GetError(), "result lost: the rendered video video.mp4 is gone") || c.GetResultObject() != nil {
		t.Errorf("completion of the lost video: exit %d error %q object %v", c.GetExitCode(), c.GetError(), c.GetResultObject())
	}
	if c := h.fake.WaitComplete(t, next, 30*time.Second); c.GetExitCode() != 0 {
		t.Errorf("the next task: %v", c)
	}
	if len(store.all()) != 0 {
		t.Errorf("%d uploads of a lost video", len(store.all()))
	}
}
