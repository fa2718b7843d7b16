package e2e

import (
	"strings"
	"testing"
)

// Names are limited in characters, not bytes: a name of 255 Chinese
// characters (765 bytes of UTF-8) is accepted for a task, a group and a
// template; 256 characters are refused with 30005 naming the field.
func TestNameLimitsCountCharacters(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	long, tooLong := strings.Repeat("猫", 255), strings.Repeat("猫", 256)

	refused := func(what string, code int, resp map[string]any) {
		t.Helper()
		if msg, _ := resp["message"].(string); code != 400 || resp["code"] != float64(30005) || !strings.Contains(msg, "name") {
			t.Errorf("%s with a 256-character name = %d %v, want 400/30005 naming name", what, code, resp)
		}
	}

	code, task, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": long, "command": "echo"})
	if code != 200 || task["name"] != long {
		t.Errorf("task with a 255-character name = %d %v", code, task)
	}
	code, resp, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": tooLong, "command": "echo"})
	refused("task", code, resp)

	group := func(name string) map[string]any {
		return map[string]any{"name": name, "mode": "serial", "start": false,
			"tasks": []map[string]any{{"name": "下载数据", "command": "true"}}}
	}
	if code, g, _ := w.call("POST", "/api/v1/task-groups", key, group(long)); code != 200 || g["name"] != long {
		t.Errorf("group with a 255-character name = %d %v", code, g)
	}
	code, resp, _ = w.call("POST", "/api/v1/task-groups", key, group(tooLong))
	refused("group", code, resp)

	tmpl := func(id, name string) map[string]any {
		return map[string]any{"id": id, "name": name, "command": "python", "description": strings.Repeat("描", 4096)}
	}
	if code, tp, _ := w.call("POST", "/api/v1/templates", key, tmpl("long-name", long)); code != 200 || tp["name"] != long {
		t.Errorf("template with a 255-character name and a 4096-character description = %d %v", code, tp)
	}
	code, resp, _ = w.call("POST", "/api/v1/templates", key, tmpl("too-long-name", tooLong))
	refused("template", code, resp)
}
