package ctl

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIntegrationVideo(t *testing.T) {
	s := newStack(t)
	out := lines(ok(t, s.ctl(t, "video", "submit", "--model", "wan2.2-t2v", "--prompt", "一只猫", "--seed", "10", "--no-prompt-extend")).stdout)
	fields := strings.Fields(out[0])
	if len(out) != 1 || len(fields) != 2 || fields[1] != "QUEUED" {
		t.Fatalf("submit printed %q", out)
	}
	id := fields[0]
	got := ok(t, s.ctl(t, "video", "get", id)).stdout
	for _, want := range []string{"status:        QUEUED", "model:         Wan2.2-T2V-14B", "prompt:        一只猫", "seed:          10", "resolution:    480"} {
		if !strings.Contains(got, want) {
			t.Errorf("get lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "actual_prompt") {
		t.Errorf("get shows a rewritten prompt without prompt_extend:\n%s", got)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(ok(t, s.ctl(t, "video", "get", id, "-o", "json")).stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if data := doc["data"].(map[string]any); data["taskId"] != id || data["task_status"] != "QUEUED" {
		t.Errorf("-o json = %v", doc)
	}
	if out := ok(t, s.ctl(t, "video", "delete", id)).stdout; out != id+" CANCELED\n" {
		t.Errorf("delete printed %q", out)
	}
	fails(t, s.ctl(t, "video", "delete", id), "removed automatically")

	// A local first frame is sent as a data: URI.
	img := image.NewGray(image.Rect(0, 0, 400, 400))
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "first.png")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out = lines(ok(t, s.ctl(t, "video", "submit", "--model", "wan2.2-i2v", "--prompt", "a cat", "--image", "@"+path)).stdout)
	if len(out) != 1 || !strings.HasSuffix(out[0], " QUEUED") {
		t.Errorf("image_to_video submit printed %q", out)
	}
	fails(t, s.ctl(t, "video", "submit", "--model", "wan2.2-t2v"), "input.prompt")
	if r := s.ctl(t, "video", "submit", "--model", "wan2.2-i2v", "--prompt", "x", "--image", "@/no/such/file"); r.code != ExitUsage {
		t.Errorf("missing image file: exit %d, %s", r.code, r.stderr)
	}
}
