package e2e

import (
	"strings"
	"testing"
)

// A query or DELETE whose path names no task (docs/api/video.md#errors) is
// InvalidParameter naming task_id on every route alias, and a DELETE
// without an id changes nothing: it must not read as "the task is gone"
// (UNKNOWN), which is what the API answers for a task that no longer
// exists.
func TestVideoRoutesWithoutATaskID(t *testing.T) {
	t.Parallel()
	w := newVideoWorld(t)
	id := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "一只猫在草地上奔跑"}})
	for _, method := range []string{"GET", "DELETE"} {
		for _, path := range []string{"/v1/video/generations/", "/api/v1/video/generations/", "/v1/video/generations/tasks/",
			"/api/v1/video/generations/tasks/"} {
			code, body, hdr := w.call(method, path, w.premium, nil)
			videoError(t, method+" "+path, code, body, hdr, 400, "InvalidParameter")
			if msg, _ := body["message"].(string); !strings.HasPrefix(msg, "task_id: ") {
				t.Errorf("%s %s: message %q does not name task_id", method, path, msg)
			}
		}
	}
	if d := w.status(w.premium, id)["data"].(map[string]any); d["task_status"] != "QUEUED" {
		t.Errorf("after DELETEs without an id the generation is %v, want QUEUED", d["task_status"])
	}
}
