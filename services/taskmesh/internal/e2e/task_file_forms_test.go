package e2e

import (
	"testing"
)

// Task and group files (docs/api/tasks.md), turned into JSON as they are
// (`task:` and `group:` at the top), are create bodies too: the wrapper's
// object is the task or the group. A wrapper beside other keys is not the
// file's form and is refused like any unknown field.
func TestCreateTakesTheTaskFilesForms(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey

	single := `{"task": {
  "id": "task-train-001", "name": "pytorch-train", "type": "python", "command": "python",
  "args": ["train.py", "--epochs=100"], "workdir": "/workspace", "env": {"CUDA_VISIBLE_DEVICES": "0"},
  "timeout": 86400, "priority": 3, "max_retries": 3, "retry_delay": 60,
  "machine_id": "machine-001", "group_id": "", "parent_id": "", "depends_on": [],
  "lease_ttl_sec": 300, "renew_interval_sec": 60, "heartbeat_interval_sec": 30, "grace_period_sec": 30}}`
	code, task, _ := w.call("POST", "/api/v1/tasks", key, single)
	id, _ := task["id"].(string)
	if code != 200 || id == "" || task["name"] != "pytorch-train" || task["machine_id"] != "machine-001" ||
		task["timeout"] != float64(86400) || task["priority"] != float64(3) || task["status"] != "pending" {
		t.Fatalf("the single-task file = %d %v", code, task)
	}
	// Its id is the client's, as in the bare form: the same file again is
	// the same task.
	if code, again, _ := w.call("POST", "/api/v1/tasks", key, single); code != 200 || again["id"] != id {
		t.Fatalf("the same file again = %d %v, want task %s", code, again, id)
	}

	// An update takes the file's form too.
	if code, updated, _ := w.call("PUT", "/api/v1/tasks/"+id, key, `{"task": {"priority": 2, "timeout": 7200}}`); code != 200 ||
		updated["id"] != id || updated["priority"] != float64(2) || updated["timeout"] != float64(7200) || updated["name"] != "pytorch-train" {
		t.Fatalf("update in the file's form = %d %v", code, updated)
	}

	mvp := `{"task": {"name": "stability-test", "type": "shell", "command": "bash", "args": ["-c", "./stress_test.sh"],
  "timeout": 3600, "priority": 3, "repeat_count": 1,
  "targets": {"machine_ids": ["machine-001", "machine-002"], "ips": []}}}`
	code, first, _ := w.call("POST", "/api/v1/tasks", key, mvp)
	if code != 200 || first["name"] != "stability-test" || first["group_id"] == "" {
		t.Fatalf("the MVP file with two targets = %d %v", code, first)
	}

	serial := `{"group": {"mode": "serial", "tasks": [
  {"name": "下载数据", "command": "wget http://..."},
  {"name": "处理数据", "command": "python process.py"},
  {"name": "上传结果", "command": "aws s3 cp ..."}]}}`
	code, g, _ := w.call("POST", "/api/v1/task-groups", key, serial)
	members, _ := g["tasks"].([]any)
	// The design's file creates the group; its start route starts it.
	if code != 200 || g["mode"] != "serial" || len(members) != 3 || g["status"] != "pending" {
		t.Fatalf("the serial group file = %d %v", code, g)
	}
	dag := `{"group": {"mode": "dag", "tasks": [
  {"id": "download", "name": "下载数据", "command": "wget http://..."},
  {"id": "process1", "name": "处理分片1", "command": "python process.py --shard=1", "depends_on": ["download"]},
  {"id": "process2", "name": "处理分片2", "command": "python process.py --shard=2", "depends_on": ["download"]},
  {"id": "merge", "name": "合并结果", "command": "python merge.py", "depends_on": ["process1", "process2"]}]}}`
	code, g, _ = w.call("POST", "/api/v1/task-groups", key, dag)
	if members, _ := g["tasks"].([]any); code != 200 || g["mode"] != "dag" || len(members) != 4 {
		t.Fatalf("the dag group file = %d %v", code, g)
	}

	for _, c := range []struct{ path, body string }{
		{"/api/v1/tasks", `{"task": {"name": "a", "command": "true"}, "priority": 3}`},
		{"/api/v1/tasks/" + id, `{"task": {"priority": 4}, "timeout": 60}`},
		{"/api/v1/tasks", `{"group": {"mode": "serial", "tasks": [{"name": "a", "command": "true"}]}}`},
		{"/api/v1/task-groups", `{"group": {"mode": "serial", "tasks": [{"name": "a", "command": "true"}]}, "start": false}`},
		{"/api/v1/task-groups", `{"task": {"name": "a", "command": "true"}}`},
	} {
		method := "POST"
		if c.path == "/api/v1/tasks/"+id {
			method = "PUT"
		}
		if code, resp, _ := w.call(method, c.path, key, c.body); code != 400 || resp["code"] != float64(30005) {
			t.Errorf("%s %s %s = %d %v, want 400/30005", method, c.path, c.body, code, resp)
		}
	}
}
