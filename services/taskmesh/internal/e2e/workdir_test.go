package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A workdir must be an absolute path: a relative one is refused with
// 30005 naming workdir, for a task, a group member and a template; a
// missing absolute one is made and the task runs there.
func TestWorkdirMustBeAbsolute(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	refused := func(what string, code int, resp map[string]any) {
		t.Helper()
		if msg, _ := resp["message"].(string); code != 400 || resp["code"] != float64(30005) || !strings.Contains(msg, "workdir") {
			t.Errorf("%s = %d %v, want 400/30005 naming workdir", what, code, resp)
		}
	}
	for _, dir := range []string{"relative/dir", "../../.."} {
		code, resp, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "rel", "command": "pwd", "workdir": dir})
		refused("task with workdir "+dir, code, resp)
		code, resp, _ = w.call("POST", "/api/v1/task-groups", key, map[string]any{"name": "g", "mode": "serial", "start": false,
			"tasks": []map[string]any{{"name": "m", "command": "pwd", "workdir": dir}}})
		refused("group member with workdir "+dir, code, resp)
		code, resp, _ = w.call("POST", "/api/v1/templates", key, map[string]any{"id": "rel", "name": "rel", "command": "pwd", "workdir": dir})
		refused("template with workdir "+dir, code, resp)
	}

	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	dir := filepath.Join(w.dir, "made", "here")
	id := w.submit(key, map[string]any{"name": "abs", "command": "pwd", "workdir": dir})
	task := w.waitStatus(key, id, 20*time.Second, "completed")
	if task["stdout"] != dir+"\n" {
		t.Errorf("stdout %q, want the task run in %s", task["stdout"], dir)
	}
}
