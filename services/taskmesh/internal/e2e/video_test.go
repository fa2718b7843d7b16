package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// in returns the world acting for subtest t, so that helpers fail t.
func (w *videoWorld) in(t *testing.T) *videoWorld {
	c := *w
	c.world = &world{t: t, s: w.s, dir: w.dir}
	return &c
}

// videoWorld is the whole stack with the video API, a premium tenant
// "studio", a standard tenant "hobby", and an agent token to act as the
// video runner through the agent API.
type videoWorld struct {
	*world
	clock          *clocktest.Offset
	premium, other string
	agent          string
}

func newVideoWorld(t *testing.T) *videoWorld {
	t.Helper()
	dir, err := os.MkdirTemp("", "tmvideo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	clk := &clocktest.Offset{}
	// The services' warnings and errors are shown when the test fails.
	logs := &logbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	s, err := stack.Start(context.Background(), stack.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		DatabaseURL: pgtest.New(t).URL, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Timing: scheduler.Timing{SweepInterval: 100 * time.Millisecond, AgentLostAfter: time.Hour},
		Video:  &scheduler.VideoConfig{AllowPrivateImageURLs: true, SweepInterval: 100 * time.Millisecond},
		// The test plays the GPU runner and leaves generations queued from
		// one subtest to the next, more than the embedded queues' GPUs
		// admit; admission itself is tested in admission_test.go.
		NoAdmission: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	w := &videoWorld{world: &world{t: t, s: s, dir: dir}, clock: clk}
	ctx := context.Background()
	creds := s.Gateway.Credentials()
	if _, err := creds.CreateTenant(ctx, "studio", "Studio", gateway.TierPremium); err != nil {
		t.Fatal(err)
	}
	if _, w.premium, err = creds.CreateAPIKey(ctx, "studio", "video", nil); err != nil {
		t.Fatal(err)
	}
	w.other = w.tenantKey("hobby")
	w.agent = w.agentToken("gpu-1")
	return w
}

// post submits a generation and returns its task id.
func (w *videoWorld) post(key string, body map[string]any) string {
	w.t.Helper()
	return w.postAt("/v1/video/generations", key, body)
}

// postAt submits a generation through the route path.
func (w *videoWorld) postAt(path, key string, body map[string]any) string {
	w.t.Helper()
	code, resp, hdr := w.call("POST", path, key, body)
	out, _ := resp["output"].(map[string]any)
	if code != 200 || out["task_status"] != "QUEUED" || resp["request_id"] != hdr.Get("X-Request-Id") || len(resp) != 2 || len(out) != 2 {
		w.t.Fatalf("POST = %d %v", code, resp)
	}
	return out["task_id"].(string)
}

func (w *videoWorld) get(key, id string) (int, map[string]any) {
	w.t.Helper()
	code, body, _ := w.call("GET", "/v1/video/generations/"+id, key, nil)
	return code, body
}

// status GETs id through the documented routes and their aliases under
// the other prefix, and checks they agree.
func (w *videoWorld) status(key, id string) map[string]any {
	w.t.Helper()
	code, a := w.get(key, id)
	if code != 200 {
		w.t.Fatalf("GET %s = %d %v", id, code, a)
	}
	da := a["data"].(map[string]any)
	for _, path := range []string{"/api/v1/video/generations/tasks/", "/api/v1/video/generations/", "/v1/video/generations/tasks/"} {
		code2, b, _ := w.call("GET", path+id, key, nil)
		if code2 != 200 {
			w.t.Fatalf("GET %s%s = %d %v", path, id, code2, b)
		}
		db := b["data"].(map[string]any)
		if da["task_status"] != db["task_status"] || da["taskProgress"] != db["taskProgress"] {
			w.t.Fatalf("GET routes disagree: %v / %s: %v", a, path, b)
		}
	}
	return a
}

// claim leases the video task id to gpu-1 and returns the attempt id.
func (w *videoWorld) claim(id string) string {
	w.t.Helper()
	code, resp, _ := w.call("POST", "/api/v1/agent/tasks/claim", w.agent,
		map[string]any{"agent_id": "gpu-1", "machine_id": "gpu-node-1", "limit": 100, "types": []string{"video"}})
	if code != 200 {
		w.t.Fatalf("claim = %d %v", code, resp)
	}
	tasks, _ := resp["tasks"].([]any)
	for _, raw := range tasks {
		if task := raw.(map[string]any); task["id"] == id {
			return task["attempt_id"].(string)
		}
	}
	w.t.Fatalf("task %s not claimed: %v", id, resp)
	return ""
}

func (w *videoWorld) agentCall(path string, body map[string]any) map[string]any {
	w.t.Helper()
	body["agent_id"] = "gpu-1"
	code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+path, w.agent, body)
	if code != 200 {
		w.t.Fatalf("%s = %d %v", path, code, resp)
	}
	return resp
}

// videoError checks an error answer of the video API.
func videoError(t *testing.T, what string, code int, body map[string]any, hdr http.Header, status int, want string) {
	t.Helper()
	msg, _ := body["message"].(string)
	if code != status || body["code"] != want || msg == "" || body["request_id"] != hdr.Get("X-Request-Id") || len(body) != 3 {
		t.Errorf("%s: %d %v, want %d %s", what, code, body, status, want)
	}
}

var (
	secondTime = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`)
	milliTime  = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$`)
)

func pngDataURI(t *testing.T, w, h int, alpha bool) string {
	t.Helper()
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngImage(t, w, h, alpha))
}

// pngImage is a white w×h PNG, with one translucent pixel when alpha.
func pngImage(t *testing.T, w, h int, alpha bool) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	if alpha {
		img.Set(0, 0, color.NRGBA{A: 0x10})
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestVideoGenerationAPI(t *testing.T) {
	t.Parallel()
	w := newVideoWorld(t)

	t.Run("text_to_video answers the documented shapes", func(t *testing.T) {
		w := w.in(t)
		id := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "一只猫在草地上奔跑"}})
		resp := w.status(w.premium, id)
		// The /api/v1 prefix the DELETE route documents takes the submission too.
		alias := w.postAt("/api/v1/video/generations", w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "一只狗"}})
		if d := w.status(w.premium, alias)["data"].(map[string]any); d["task_status"] != "QUEUED" || d["taskType"] != "text_to_video" {
			t.Errorf("submitted through /api/v1: %v", d)
		}
		if resp["success"] != true || resp["code"] != 200.0 || resp["failed"] != false || resp["requestId"] != resp["request_id"] || resp["requestId"] == "" {
			t.Errorf("envelope = %v", resp)
		}
		d := resp["data"].(map[string]any)
		want := map[string]any{"taskId": id, "task_id": id, "taskStatus": "QUEUED", "task_status": "QUEUED", "model": "Wan2.2-T2V-14B",
			"taskType": "text_to_video", "mediaType": "video", "taskProgress": 0.0, "scheduled_time": nil, "completed_time": nil}
		for k, v := range want {
			if got, ok := d[k]; !ok || got != v {
				t.Errorf("data.%s = %v (present %v), want %v", k, got, ok, v)
			}
		}
		if _, ok := d["code"]; ok {
			t.Errorf("a queued task shows a failure code: %v", d)
		}
		if id, _ := d["id"].(float64); id <= 0 || !secondTime.MatchString(d["gmtCreate"].(string)) || !milliTime.MatchString(d["submit_time"].(string)) {
			t.Errorf("id and times: %v", d)
		}
		if ts, _ := d["gmtCreateTimeStamp"].(float64); time.Since(time.UnixMilli(int64(ts))).Abs() > time.Minute {
			t.Errorf("gmtCreateTimeStamp = %v", d["gmtCreateTimeStamp"])
		}
		in := d["taskInput"].(map[string]any)
		seed, _ := in["seed"].(float64)
		actual, _ := in["actual_prompt"].(string)
		if in["prompt"] != "一只猫在草地上奔跑" || !strings.HasPrefix(actual, "一只猫在草地上奔跑，") || in["resolution"] != "480" ||
			in["duration"] != 5.0 || in["video_count"] != 1.0 || in["video_url"] != nil || seed < 0 || seed > 2147483647 {
			t.Errorf("taskInput = %v", in)
		}
		// The task behind it: premium route, GPUs, size and frames.
		task := w.task(w.premium, id)
		spec := task
		video := spec["video"].(map[string]any)
		if spec["priority"] != 2.0 || spec["queue"] != "tenant-high-priority-queue" || spec["type"] != "video" ||
			spec["resources"].(map[string]any)["nvidia.com/gpu"] != "2" || video["width"] != 832.0 || video["height"] != 480.0 ||
			video["frame_num"] != 81.0 || video["seed"] != seed {
			t.Errorf("task spec = %v", spec)
		}
	})

	t.Run("standard tier, explicit parameters, prompt_extend off", func(t *testing.T) {
		w := w.in(t)
		long := strings.Repeat("猫", 900)
		id := w.post(w.other, map[string]any{"model": "wan2.2-t2v", "type": "text_to_video",
			"input":      map[string]any{"prompt": long, "negative_prompt": strings.Repeat("x", 600)},
			"parameters": map[string]any{"resolution": "720P", "duration": 5, "prompt_extend": false, "watermark": true, "seed": 10, "video_count": 1}})
		in := w.status(w.other, id)["data"].(map[string]any)["taskInput"].(map[string]any)
		if _, ok := in["actual_prompt"]; ok {
			t.Errorf("actual_prompt shown without prompt_extend: %v", in)
		}
		if p := in["prompt"].(string); len([]rune(p)) != 800 || in["resolution"] != "720" || in["seed"] != 10.0 {
			t.Errorf("taskInput = %v (prompt of %d characters)", in, len([]rune(p)))
		}
		spec := w.task(w.other, id)
		video := spec["video"].(map[string]any)
		if spec["priority"] != 5.0 || spec["queue"] != "tenant-low-priority-queue" || video["width"] != 1280.0 ||
			video["watermark"] != true || len(video["negative_prompt"].(string)) != 500 {
			t.Errorf("task spec = %v", spec)
		}
	})

	t.Run("image_to_video stores the first frame", func(t *testing.T) {
		w := w.in(t)
		frame := pngDataURI(t, 800, 600, false)
		id := w.post(w.premium, map[string]any{"model": "wan2.2-i2v", "type": "image_to_video",
			"input": map[string]any{"prompt": "a cat", "image": frame}, "parameters": map[string]any{"resolution": "720P"}})
		video := w.task(w.premium, id)["video"].(map[string]any)
		if video["width"] != 1104.0 || video["height"] != 832.0 || !strings.HasPrefix(video["image_object_key"].(string), "video-inputs/studio/") {
			t.Fatalf("video = %v", video)
		}
		resp, err := http.Get(video["image_url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(frame, "data:image/png;base64,"))
		if resp.StatusCode != 200 || !bytes.Equal(got, raw) {
			t.Errorf("first frame link = %d, %d bytes", resp.StatusCode, len(got))
		}
		// By URL, under the other name img_url.
		var buf bytes.Buffer
		_ = png.Encode(&buf, image.NewGray(image.Rect(0, 0, 400, 1000)))
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write(buf.Bytes()) }))
		defer srv.Close()
		id = w.post(w.premium, map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "a cat", "img_url": srv.URL + "/cat.png"}})
		video = w.task(w.premium, id)["video"].(map[string]any)
		if video["height"].(float64) <= video["width"].(float64) {
			t.Errorf("a portrait image gave %vx%v", video["width"], video["height"])
		}
	})

	t.Run("first frames up to 10 MB, not more", func(t *testing.T) {
		w := w.in(t)
		// Stored uncompressed, a 1800×1700 RGBA PNG is about 9.2 MB,
		// some 12 MB as a data: URI.
		img := image.NewRGBA(image.Rect(0, 0, 1800, 1700))
		_, _ = rand.Read(img.Pix)
		for i := 3; i < len(img.Pix); i += 4 {
			img.Pix[i] = 0xff
		}
		var buf bytes.Buffer
		if err := (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		if buf.Len() < 8<<20 || buf.Len() > 10<<20 {
			t.Fatalf("the test image has %d bytes", buf.Len())
		}
		id := w.post(w.premium, map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "big",
			"image": "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())}})
		if video := w.task(w.premium, id)["video"].(map[string]any); video["image_object_key"] == "" {
			t.Errorf("video = %v", video)
		}
		tooBig := "data:image/png;base64," + base64.StdEncoding.EncodeToString(append(buf.Bytes(), make([]byte, 2<<20)...))
		code, body, hdr := w.call("POST", "/v1/video/generations", w.premium, map[string]any{"model": "wan2.2-i2v",
			"input": map[string]any{"prompt": "too big", "image": tooBig}})
		videoError(t, "11 MB", code, body, hdr, 400, "InvalidParameter")
		if msg, _ := body["message"].(string); !strings.Contains(msg, "10 MB") {
			t.Errorf("message = %q", msg)
		}
		// A frame of about 15 MB, some 20 MB as a data: URI: past what a
		// 10 MB frame needs, still answered with the field's own error.
		muchTooBig := "data:image/png;base64," + base64.StdEncoding.EncodeToString(append(buf.Bytes(), make([]byte, 6<<20)...))
		code, body, hdr = w.call("POST", "/v1/video/generations", w.premium, map[string]any{"model": "wan2.2-i2v",
			"input": map[string]any{"prompt": "much too big", "image": muchTooBig}})
		videoError(t, "15 MB", code, body, hdr, 400, "InvalidParameter")
		if msg, _ := body["message"].(string); !strings.Contains(msg, "input.image") || !strings.Contains(msg, "10 MB") {
			t.Errorf("message = %q", msg)
		}
	})

	t.Run("invalid requests are refused and store nothing", func(t *testing.T) {
		w := w.in(t)
		inputs := func() int {
			n := 0
			_ = filepath.Walk(w.s.ObjectDir, func(p string, _ os.FileInfo, _ error) error {
				if strings.Contains(p, "video-inputs") {
					n++
				}
				return nil
			})
			return n
		}
		before := inputs()
		tests := map[string]struct {
			body  any
			field string
		}{
			"no prompt":         {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{}}, "input.prompt"},
			"unknown model":     {map[string]any{"model": "sora", "input": map[string]any{"prompt": "x"}}, "model"},
			"type mismatch":     {map[string]any{"model": "wan2.2-t2v", "type": "image_to_video", "input": map[string]any{"prompt": "x"}}, "type"},
			"bad image for t2v": {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x", "image": pngDataURI(t, 400, 400, true)}}, "input.image"},
			"no image for i2v":  {map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "x"}}, "input.image"},
			"png with alpha":    {map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "x", "image": pngDataURI(t, 400, 400, true)}}, "input.image"},
			"359 pixels":        {map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "x", "image": pngDataURI(t, 359, 400, false)}}, "input.image"},
			"unreachable URL":   {map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "x", "image": "http://127.0.0.1:1/a.png"}}, "input.image"},
			"duration 10":       {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"duration": 10}}, "parameters.duration"},
			"resolution 4K":     {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"resolution": "4K"}}, "parameters.resolution"},
			"seed out of range": {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"seed": 2147483648}}, "parameters.seed"},
			"seed as a string":  {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"seed": "10"}}, "parameters.seed: must be an integer"},
			"video_count 2":     {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"video_count": 2}}, "parameters.video_count"},
			"duration a string": {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"duration": "5"}}, "parameters.duration: must be an integer"},
			"unknown field":     {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "size": "1280*720"}, "size: unknown field"},
			"seed not a number": {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"seed": "abc"}}, `parameters.seed: must be an integer, not the string "abc"`},
			"watermark 1":       {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "parameters": map[string]any{"watermark": 1}}, "parameters.watermark: must be true or false, not 1"},
			"prompt a number":   {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": 5}}, "input.prompt: must be a string, not 5"},
			"webhook secret":    {map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x"}, "webhook": map[string]any{"url": "https://example.com/h", "secret": "s"}}, "webhook.secret: unknown field"},
			"malformed JSON":    {`{"model":`, ""},
			"data after JSON":   {`{"model": "wan2.2-t2v", "input": {"prompt": "x"}} xyz`, "unexpected data after"},
		}
		for name, tc := range tests {
			code, body, hdr := w.call("POST", "/v1/video/generations", w.premium, tc.body)
			videoError(t, name, code, body, hdr, 400, "InvalidParameter")
			if msg, _ := body["message"].(string); !strings.Contains(msg, tc.field) {
				t.Errorf("%s: message %q does not name %s", name, msg, tc.field)
			}
		}
		if after := inputs(); after != before {
			t.Errorf("refused requests stored %d first frames", after-before)
		}
		// A text_to_video with a good image is accepted; the image was
		// checked and is not kept (a text_to_video has no first frame).
		code, body, _ := w.call("POST", "/v1/video/generations", w.premium,
			map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "x", "image": pngDataURI(t, 400, 400, false)}})
		if out, _ := body["output"].(map[string]any); code != 200 || out["task_status"] != "QUEUED" {
			t.Errorf("text_to_video with an image = %d %v", code, body)
		}
		if after := inputs(); after != before {
			t.Errorf("a text_to_video stored %d first frames", after-before)
		}
	})

	t.Run("authentication and tenants", func(t *testing.T) {
		w := w.in(t)
		code, body, hdr := w.call("POST", "/v1/video/generations", "", map[string]any{"model": "wan2.2-t2v"})
		videoError(t, "no key", code, body, hdr, 401, "InvalidApiKey")
		if body["message"] != "Invalid API-key provided." {
			t.Errorf("401 message = %v", body["message"])
		}
		code, body, hdr = w.call("GET", "/v1/video/generations/x", "tm_not-a-key", nil)
		videoError(t, "bad key", code, body, hdr, 401, "InvalidApiKey")
		code, body, hdr = w.call("GET", "/v1/video/generations/x", w.agent, nil)
		videoError(t, "agent token", code, body, hdr, 403, "AccessDenied")

		id := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "mine"}})
		code, body, hdr = w.call("GET", "/v1/video/generations/"+id, w.other, nil)
		videoError(t, "another tenant's GET", code, body, hdr, 403, "AccessDenied")
		code, body, hdr = w.call("DELETE", "/api/v1/video/generations/"+id, w.other, nil)
		videoError(t, "another tenant's DELETE", code, body, hdr, 403, "AccessDenied")
		if d := w.status(w.premium, id)["data"].(map[string]any); d["task_status"] != "QUEUED" {
			t.Errorf("after another tenant's DELETE: %v", d)
		}
		// A task of the task API is not a video generation.
		plain := w.submit(w.premium, map[string]any{"name": "x", "command": "true"})
		if d := w.status(w.premium, plain)["data"].(map[string]any); d["task_status"] != "UNKNOWN" {
			t.Errorf("a shell task through the video API: %v", d)
		}
	})

	t.Run("the DELETE table in every state", func(t *testing.T) {
		w := w.in(t)
		del := func(id string, path string) (int, map[string]any, http.Header) {
			return w.call("DELETE", path+id, w.premium, nil)
		}
		// QUEUED → CANCELED; CANCELED → refused.
		queued := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "queued"}})
		code, body, _ := del(queued, "/api/v1/video/generations/")
		if out, _ := body["output"].(map[string]any); code != 200 || out["task_status"] != "CANCELED" || out["task_id"] != queued || body["request_id"] == "" {
			t.Fatalf("DELETE queued = %d %v", code, body)
		}
		d := w.status(w.premium, queued)["data"].(map[string]any)
		if d["task_status"] != "CANCELED" || !milliTime.MatchString(d["completed_time"].(string)) {
			t.Errorf("canceled = %v", d)
		}
		code, body, hdr := del(queued, "/v1/video/generations/")
		videoError(t, "DELETE canceled", code, body, hdr, 409, "UnsupportedOperation.TaskCanceled")

		// RUNNING → refused; progress and scheduled_time shown.
		running := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "running"}})
		att := w.claim(running)
		if d := w.status(w.premium, running)["data"].(map[string]any); d["task_status"] != "QUEUED" {
			t.Errorf("leased but not started = %v", d["task_status"])
		}
		w.agentCall(running+"/start", map[string]any{"attempt_id": att})
		w.agentCall(running+"/progress", map[string]any{"attempt_id": att, "progress": 40})
		d = w.status(w.premium, running)["data"].(map[string]any)
		if d["task_status"] != "RUNNING" || d["taskProgress"] != 40.0 || !milliTime.MatchString(d["scheduled_time"].(string)) || d["completed_time"] != nil {
			t.Errorf("running = %v", d)
		}
		code, body, hdr = del(running, "/api/v1/video/generations/")
		videoError(t, "DELETE running", code, body, hdr, 409, "UnsupportedOperation.TaskRunning")

		// SUCCEEDED: the runner uploads the MP4 as the result object.
		mp4 := append([]byte("\x00\x00\x00\x18ftypmp42"), bytes.Repeat([]byte{7}, 1000)...)
		up := w.agentCall(running+"/result/upload", map[string]any{"attempt_id": att, "size_bytes": len(mp4)})
		req, _ := http.NewRequest("PUT", up["upload_url"].(string), bytes.NewReader(mp4))
		for k, v := range up["headers"].(map[string]any) {
			req.Header.Set(k, v.(string))
		}
		req.ContentLength = int64(len(mp4))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("upload: %v %v (Content-Type %v)", resp, err, up["headers"])
		}
		if key := up["object_key"].(string); !strings.HasSuffix(key, ".mp4") || req.Header.Get("Content-Type") != "video/mp4" {
			t.Errorf("result object %s, %s", key, req.Header.Get("Content-Type"))
		}
		w.agentCall(running+"/complete", map[string]any{"attempt_id": att, "exit_code": 0,
			"result_object": map[string]any{"key": up["object_key"], "size_bytes": len(mp4)}})
		d = w.status(w.premium, running)["data"].(map[string]any)
		in := d["taskInput"].(map[string]any)
		url, _ := in["video_url"].(string)
		if d["task_status"] != "SUCCEEDED" || d["taskProgress"] != 100.0 || url == "" || !milliTime.MatchString(d["completed_time"].(string)) {
			t.Fatalf("succeeded = %v", d)
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, mp4) || resp.Header.Get("Content-Type") != "video/mp4" {
			t.Errorf("video link = %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(got))
		}
		// SUCCEEDED → deleted, the video with it.
		code, body, _ = del(running, "/v1/video/generations/")
		if out, _ := body["output"].(map[string]any); code != 200 || out["task_status"] != "UNKNOWN" {
			t.Fatalf("DELETE succeeded = %d %v", code, body)
		}
		if resp, err := http.Get(url); err != nil || resp.StatusCode != 404 {
			t.Errorf("the video outlived its task: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		gone := w.status(w.premium, running)
		if d := gone["data"].(map[string]any); d["task_status"] != "UNKNOWN" || d["task_id"] != running || d["taskInput"] != nil || gone["request_id"] == "" {
			t.Errorf("deleted = %v", gone)
		}

		// FAILED: the runner's code and message; then deleted.
		failed := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "failing"}})
		att = w.claim(failed)
		w.agentCall(failed+"/start", map[string]any{"attempt_id": att})
		w.agentCall(failed+"/complete", map[string]any{"attempt_id": att, "exit_code": 1, "error": "InvalidParameter: The size is not match"})
		d = w.status(w.premium, failed)["data"].(map[string]any)
		if d["task_status"] != "FAILED" || d["code"] != "InvalidParameter" || d["message"] != "The size is not match" {
			t.Errorf("failed = %v", d)
		}
		code, body, _ = del(failed, "/api/v1/video/generations/tasks/")
		if out, _ := body["output"].(map[string]any); code != 200 || out["task_status"] != "UNKNOWN" {
			t.Errorf("DELETE failed = %d %v", code, body)
		}
		if d := w.status(w.premium, failed)["data"].(map[string]any); d["task_status"] != "UNKNOWN" {
			t.Errorf("after DELETE: %v", d)
		}
		// UNKNOWN → nothing to do.
		code, body, _ = del("no-such-task", "/v1/video/generations/tasks/")
		if out, _ := body["output"].(map[string]any); code != 200 || out["task_status"] != "UNKNOWN" {
			t.Errorf("DELETE unknown = %d %v", code, body)
		}
	})

	t.Run("the gRPC front door forwards VideoService", func(t *testing.T) {
		w := w.in(t)
		conn, err := grpc.NewClient(w.s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := videov1.NewVideoServiceClient(conn)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+w.premium)
		created, err := client.CreateVideoGeneration(ctx, &videov1.CreateVideoGenerationRequest{Model: "wan2.2-t2v",
			Input: &videov1.VideoGenerationInput{Prompt: "over gRPC"}})
		if err != nil || created.GetOutput().GetTaskStatus() != "QUEUED" {
			t.Fatalf("create = %v, %v", created, err)
		}
		got, err := client.GetVideoGeneration(ctx, &videov1.GetVideoGenerationRequest{TaskId: created.GetOutput().GetTaskId()})
		if err != nil || got.GetData().GetTaskInput().GetPrompt() != "over gRPC" {
			t.Errorf("get = %v, %v", got, err)
		}
		agentCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+w.agent)
		if _, err := client.GetVideoGeneration(agentCtx, &videov1.GetVideoGenerationRequest{TaskId: "x"}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("agent token: %v", err)
		}
	})

	t.Run("after 24 hours every generation is UNKNOWN and removed", func(t *testing.T) {
		w := w.in(t)
		queued := w.post(w.premium, map[string]any{"model": "wan2.2-i2v", "input": map[string]any{"prompt": "old", "image": pngDataURI(t, 400, 400, false)}})
		canceled := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "old"}})
		if code, _, _ := w.call("DELETE", "/v1/video/generations/"+canceled, w.premium, nil); code != 200 {
			t.Fatal("cancel failed")
		}
		frameURL := w.task(w.premium, queued)["video"].(map[string]any)["image_url"].(string)
		w.clock.Advance(24*time.Hour + time.Minute)
		for _, id := range []string{queued, canceled} {
			resp := w.status(w.premium, id)
			if d := resp["data"].(map[string]any); d["task_status"] != "UNKNOWN" || d["task_id"] != id || resp["request_id"] == "" {
				t.Errorf("expired %s = %v", id, resp)
			}
		}
		// The sweep removes them (the task API no longer finds them) and
		// deletes the first frame.
		deadline := time.Now().Add(10 * time.Second)
		for _, id := range []string{queued, canceled} {
			for {
				code, _, _ := w.call("GET", "/api/v1/tasks/"+id, w.premium, nil)
				if code == 404 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("task %s still there after the sweep (%d)", id, code)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if resp, err := http.Get(frameURL); err != nil || resp.StatusCode != 404 {
			t.Errorf("the first frame outlived its task: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		code, body, _ := w.call("DELETE", "/v1/video/generations/"+canceled, w.premium, nil)
		if out, _ := body["output"].(map[string]any); code != 200 || out["task_status"] != "UNKNOWN" {
			t.Errorf("DELETE expired = %d %v", code, body)
		}
	})
}
