package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// The result size rule as an agent that speaks only the REST protocol meets
// it (docs/api/tasks.md, GetTaskResult): output reported inline under
// 64 KiB is kept with the task (storage_type db); 64 KiB or more is stored
// in the object store by the scheduler (s3, a link to the whole output as
// JSON, the last 32 KiB inline).
func TestResultSizeDecidesWhereItIsKept(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	tok := w.agentToken("rs-1")
	run := func(stdout string) map[string]any {
		t.Helper()
		id := w.submit(key, map[string]any{"name": "rs", "type": "shell", "command": "true"})
		attempt := w.claimREST(tok, "rs-1", id)
		body := map[string]any{"agent_id": "rs-1", "attempt_id": attempt}
		if code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+id+"/start", tok, body); code != 200 {
			t.Fatalf("start: %d %v", code, resp)
		}
		body["exit_code"], body["stdout"] = 0, stdout
		if code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+id+"/complete", tok, body); code != 200 || resp["status"] != "completed" {
			t.Fatalf("complete with %d bytes: %d %v", len(stdout), code, resp)
		}
		_, res, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
		return res
	}
	under := strings.Repeat("u", 65535)
	if res := run(under); res["storage_type"] != "db" || res["stdout"] != under || res["presigned_url"] != nil && res["presigned_url"] != "" {
		t.Errorf("65535 bytes: storage_type %v, %d bytes inline, link %v", res["storage_type"], len(res["stdout"].(string)), res["presigned_url"])
	}
	at := strings.Repeat("a", 65533) + "end"
	res := run(at)
	inline, _ := res["stdout"].(string)
	link, _ := res["presigned_url"].(string)
	if res["storage_type"] != "s3" || link == "" || len(inline) != 32<<10 || !strings.HasSuffix(inline, "end") {
		t.Fatalf("65536 bytes: storage_type %v, %d bytes inline, link %q", res["storage_type"], len(inline), link)
	}
	code, stored := get(t, link)
	var whole struct{ Stdout string }
	if err := json.Unmarshal(stored, &whole); code != 200 || err != nil || whole.Stdout != at {
		t.Errorf("the link: %d, %v, %d bytes of stdout", code, err, len(whole.Stdout))
	}
}
