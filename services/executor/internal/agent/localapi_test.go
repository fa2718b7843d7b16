package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/localapi"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/proto"
)

type apiClient struct {
	t    *testing.T
	base string
}

// do sends a request and decodes the JSON answer into a map.
func (c apiClient) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("%s %s: body %q is not JSON: %v", method, path, b, err)
	}
	return resp.StatusCode, m
}

func (c apiClient) waitStatus(id, status string) map[string]any {
	c.t.Helper()
	var task map[string]any
	leasetest.WaitFor(c.t, 10*time.Second, id+" "+status, func() bool {
		_, task = c.do("GET", "/api/v1/tasks/"+id, "")
		return task["status"] == status
	})
	return task
}

func TestLocalAPI(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.LocalAPIAddr = "127.0.0.1:0"
		c.BlockedPatterns = []string{"rm -rf /"}
		c.GracePeriod = time.Second
	}).start()
	api := apiClient{t: t, base: "http://" + h.agent.LocalAPIAddr()}

	code, created := api.do("POST", "/api/v1/tasks", `{"name":"hello","type":"shell","command":"echo 'hi'","priority":3}`)
	if code != 200 || created["status"] != "pending" || created["origin"] != "local" || created["synced"] != true ||
		created["priority"] != float64(3) || created["id"] == "" {
		t.Fatalf("create = %d %v", code, created)
	}
	helloID := created["id"].(string)
	// Left out, the grace is the agent's, recorded with the task.
	if created["grace_period_sec"] != float64(1) {
		t.Errorf("created task's grace_period_sec = %v, want the agent's 1", created["grace_period_sec"])
	}
	done := api.waitStatus(helloID, "completed")
	if done["stdout"] != "hi\n" || done["exit_code"] != float64(0) || done["started_at"] == nil || done["ended_at"] == nil ||
		done["grace_period_sec"] != float64(1) {
		t.Errorf("completed task = %v", done)
	}
	// Taken by this agent when it left the queue: an agent and an attempt
	// come with the time it was assigned.
	if done["assigned_agent_id"] != h.agent.cfg.AgentID || done["attempt_id"] == "" || done["assigned_at"] == nil ||
		done["assigned_at"].(string) > done["started_at"].(string) {
		t.Errorf("completed task's assignment = %v", done)
	}

	_, long := api.do("POST", "/api/v1/tasks", `{"name":"long","command":"sleep","args":["30"],"grace_period_sec":2}`)
	longID := long["id"].(string)
	if long["grace_period_sec"] != float64(2) {
		t.Errorf("grace_period_sec = %v, want the spec's 2", long["grace_period_sec"])
	}
	api.waitStatus(longID, "running")
	code, cancelled := api.do("POST", "/api/v1/tasks/"+longID+"/cancel", `{}`)
	if code != 200 {
		t.Fatalf("cancel = %d %v", code, cancelled)
	}
	c := api.waitStatus(longID, "cancelled")
	if c["error"] != "cancelled through the agent-local API" || c["exit_code"] != float64(143) {
		t.Errorf("cancelled task = %v", c)
	}

	// A local task shows its retries; a failed attempt with retries left
	// is followed by the next, which the task's id reads.
	code, flaky := api.do("POST", "/api/v1/tasks", `{"name":"flaky","command":"false","max_retries":1,"retry_delay":0}`)
	if code != 200 || flaky["max_retries"] != float64(1) || flaky["retry_delay"] != float64(0) || flaky["retry_count"] != float64(0) ||
		flaky["retry_at"] != nil {
		t.Fatalf("create with retries = %d %v", code, flaky)
	}
	flakyID := flaky["id"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, got := api.do("GET", "/api/v1/tasks/"+flakyID, "")
		if got["retry_count"] == float64(1) && got["status"] == "failed" {
			if got["retry_at"] == nil {
				t.Errorf("the retry shows no retry_at: %v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retried task is %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, rows := api.do("GET", "/api/v1/tasks?status=failed", ""); code != 200 || len(rows["tasks"].([]any)) != 2 {
		t.Errorf("failed attempts = %d %v, want the task's two", code, rows)
	}

	code, list := api.do("GET", "/api/v1/tasks", "")
	tasks, _ := list["tasks"].([]any)
	if code != 200 || len(tasks) != 4 || tasks[0].(map[string]any)["id"] != flakyID || tasks[2].(map[string]any)["id"] != longID ||
		tasks[3].(map[string]any)["id"] != helloID {
		t.Errorf("list = %d %v, want newest first", code, list)
	}
	_, filtered := api.do("GET", "/api/v1/tasks?status=completed", "")
	if ft, _ := filtered["tasks"].([]any); len(ft) != 1 {
		t.Errorf("list by status = %v", filtered)
	}

	code, qs := api.do("GET", "/api/v1/queue/status", "")
	if code != 200 || qs["agent_id"] != "agent-1" || qs["machine_id"] != "machine-1" || qs["slots"] != float64(4) ||
		qs["running"] != float64(0) || qs["pending"] != float64(0) || qs["server_reachable"] != true {
		t.Errorf("queue status = %d %v", code, qs)
	}

	errTests := []struct {
		name, method, path, body string
		wantHTTP                 int
		wantCode                 float64
		wantMsg                  string
	}{
		{"unknown id", "GET", "/api/v1/tasks/nope", "", 404, 30004, "task nope not found"},
		{"cancel unknown", "POST", "/api/v1/tasks/nope/cancel", "{}", 404, 30004, "not found"},
		{"cancel final", "POST", "/api/v1/tasks/" + helloID + "/cancel", "{}", 409, 30002, "already completed"},
		{"missing name", "POST", "/api/v1/tasks", `{"command":"echo"}`, 400, 30005, "name is required"},
		{"bad type", "POST", "/api/v1/tasks", `{"name":"x","type":"docker","command":"echo"}`, 400, 30005, "type"},
		{"missing command", "POST", "/api/v1/tasks", `{"name":"x","type":"shell"}`, 400, 30005, "command is required"},
		{"an id with a slash", "POST", "/api/v1/tasks", `{"id":"a/b","name":"x","command":"echo"}`, 400, 30005, `id "a/b" cannot name a task in a route`},
		{"an id of dots", "POST", "/api/v1/tasks", `{"id":"..","name":"x","command":"echo"}`, 400, 30005, "cannot name a task in a route"},
		{"a long id", "POST", "/api/v1/tasks", `{"id":"` + strings.Repeat("é", 129) + `","name":"x","command":"echo"}`, 400, 30005, "id is longer than 128 characters"},
		{"a key of neither a task nor a spec", "POST", "/api/v1/tasks", `{"name":"x","command":"echo","status":"pending","colour":"red"}`, 400, 30005, "colour"},
		{"a body too large", "POST", "/api/v1/tasks", `{"name":"` + strings.Repeat("x", localapi.MaxCreateBody) + `"}`, 413, 30005, "request body too large"},
		{"blocked pattern", "POST", "/api/v1/tasks", `{"name":"x","command":"sh","args":["-c","rm -rf /"]}`, 400, 30005, `blocked pattern "rm -rf /"`},
		{"bad json", "POST", "/api/v1/tasks", `{"name":`, 400, 30005, ""},
		{"shell syntax", "POST", "/api/v1/tasks", `{"name":"x","command":"echo a | wc -l"}`, 400, 30005, "command: '|' at character 8 is shell syntax"},
		{"a shell builtin", "POST", "/api/v1/tasks", `{"name":"x","command":"exit 1"}`, 400, 30005, "command: exit is a shell builtin, not a program"},
		{"bad limit", "GET", "/api/v1/tasks?limit=5000", "", 400, 30005, "limit"},
		{"too many retries", "POST", "/api/v1/tasks", `{"name":"x","command":"false","max_retries":101}`, 400, 30005, "max_retries"},
		{"long retry delay", "POST", "/api/v1/tasks", `{"name":"x","command":"false","retry_delay":86401}`, 400, 30005, "retry_delay"},
		{"relative workdir", "POST", "/api/v1/tasks", `{"name":"x","command":"pwd","workdir":"relative/dir"}`, 400, 30005, "not an absolute path"},
		{"workdir upward", "POST", "/api/v1/tasks", `{"name":"x","command":"pwd","workdir":"../../.."}`, 400, 30005, "not an absolute path"},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := api.do(tc.method, tc.path, tc.body)
			msg, _ := body["message"].(string)
			data, hasData := body["data"]
			if code != tc.wantHTTP || body["code"] != tc.wantCode || !strings.Contains(msg, tc.wantMsg) || !hasData || data != nil {
				t.Errorf("= %d %v, want %d {code %v, message ~%q, data null}", code, body, tc.wantHTTP, tc.wantCode, tc.wantMsg)
			}
		})
	}

	// Local tasks never reach the server.
	for _, call := range h.fake.Calls("") {
		b, _ := json.Marshal(call.Req)
		if bytes.Contains(b, []byte(helloID)) || bytes.Contains(b, []byte(longID)) {
			t.Errorf("local task sent to the server in %s", call.Method)
		}
	}
	if n := len(h.fake.Calls("CompleteTask")) + len(h.fake.Calls("StartTask")); n != 0 {
		t.Errorf("%d task calls to the server for local tasks", n)
	}
}

func TestLocalAPICancelsServerTask(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.LocalAPIAddr = "127.0.0.1:0" })
	task := shell("sleep", "30")
	task.GracePeriodSec = 1
	id := h.fake.Add(task)[0]
	h.start()
	api := apiClient{t: t, base: "http://" + h.agent.LocalAPIAddr()}
	api.waitStatus(id, "running")
	h.waitRow(id, 5*time.Second, "pid", func(r journal.Task) bool { return r.PID != 0 })
	if code, _ := api.do("POST", "/api/v1/tasks/"+id+"/cancel", "{}"); code != 200 {
		t.Fatalf("cancel = %d", code)
	}
	// The server is told the attempt was cancelled, not that it failed,
	// so the task ends cancelled there instead of being retried.
	c := h.fake.WaitComplete(t, id, 10*time.Second)
	if !c.GetCancelled() || c.GetError() != "through the agent-local API of agent "+h.agent.cfg.AgentID {
		t.Errorf("completion = %v", c)
	}
}

// A server task in the local queue shows the server's retry settings, as
// the local queue's example has them; the agent does not retry it itself:
// its failure goes to the server once.
func TestLocalViewOfAServerTaskShowsItsRetrySettings(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.LocalAPIAddr = "127.0.0.1:0" })
	task := shell("false")
	task.MaxRetries, task.RetryDelay, task.RetryCount, task.GracePeriodSec = 3, 60, 1, 5
	id := h.fake.Add(task)[0]
	h.start()
	if c := h.fake.WaitComplete(t, id, 10*time.Second); c.GetExitCode() != 1 {
		t.Fatalf("completion = %v", c)
	}
	api := apiClient{t: t, base: "http://" + h.agent.LocalAPIAddr()}
	got := api.waitStatus(id, "failed")
	if got["max_retries"] != float64(3) || got["retry_delay"] != float64(60) || got["retry_count"] != float64(1) ||
		got["grace_period_sec"] != float64(5) {
		t.Errorf("local view: max_retries %v, retry_delay %v, retry_count %v, grace_period_sec %v",
			got["max_retries"], got["retry_delay"], got["retry_count"], got["grace_period_sec"])
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(h.fake.Calls("CompleteTask")); n != 1 {
		t.Errorf("%d completions of the failed server task, want the one", n)
	}
	rows, err := h.agent.journal.WithStatus(context.Background(), journal.StatusPending)
	if err != nil || len(rows) != 0 {
		t.Errorf("pending rows after the failure = %v, %v; the agent retried a server task", rows, err)
	}
}

// A local task may carry the client's own id, as the design's local queue
// names its tasks (task-cleanup-002): the id names the task; creating it
// again while it waits or runs answers that task, and once it ended runs
// it again as a new attempt. A create body may be a row as the journal
// shows it: the agent's own fields are left out. A server task's id is
// refused.
func TestLocalAPIClientIDs(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.LocalAPIAddr = "127.0.0.1:0" })
	serverID := h.fake.Add(shell("echo", "from the server"))[0]
	h.start()
	api := apiClient{t: t, base: "http://" + h.agent.LocalAPIAddr()}
	api.waitStatus(serverID, "completed")

	row := `{"id":"task-cleanup-002","name":"cleanup-workdir","type":"shell","command":"sleep","args":["1"],"env":{},"timeout":600,"priority":5,
		"status":"pending","attempt_id":"","assigned_agent_id":"","assigned_at":null,"lease_expires_at":null,"started_at":null,
		"last_heartbeat_at":null,"exit_code":null,"error":null}`
	code, first := api.do("POST", "/api/v1/tasks", row)
	if code != 200 || first["id"] != "task-cleanup-002" || first["name"] != "cleanup-workdir" || first["origin"] != "local" {
		t.Fatalf("create with the client's id = %d %v", code, first)
	}
	// A pending attempt shows no attempt id yet; an attempt is known by
	// when it was received.
	code, again := api.do("POST", "/api/v1/tasks", row)
	if code != 200 || again["received_at"] != first["received_at"] {
		t.Errorf("create again while it waits or runs = %d %v, want the attempt received at %v", code, again, first["received_at"])
	}
	ran := api.waitStatus("task-cleanup-002", "completed")
	code, rerun := api.do("POST", "/api/v1/tasks", row)
	if code != 200 || rerun["id"] != "task-cleanup-002" || rerun["received_at"] == first["received_at"] || rerun["status"] != "pending" {
		t.Errorf("create again once it ended = %d %v, want a new attempt of the task", code, rerun)
	}
	if _, got := api.do("GET", "/api/v1/tasks/task-cleanup-002", ""); got["received_at"] != rerun["received_at"] || got["attempt_id"] == ran["attempt_id"] {
		t.Errorf("the id reads %v, want the newest attempt", got)
	}
	code, body := api.do("POST", "/api/v1/tasks", `{"id":"`+serverID+`","name":"x","command":"echo"}`)
	if code != 400 || body["code"] != float64(30005) || !strings.Contains(body["message"].(string), "server task") {
		t.Errorf("a server task's id = %d %v, want 30005", code, body)
	}
	if _, got := api.do("GET", "/api/v1/tasks/"+serverID, ""); got["origin"] != "server" || got["status"] != "completed" {
		t.Errorf("the server task after the refused create: %v", got)
	}
}

// An outcome the server refuses is synced (nothing is left to send) but
// not accepted: the local view says so in sync_note, and a delivered
// one has none.
func TestLocalViewShowsARefusedOutcome(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.LocalAPIAddr = "127.0.0.1:0" })
	refused := h.fake.Add(shell("true"))[0]
	h.fake.SetFail(func(method string, req proto.Message) error {
		if c, ok := req.(*taskv1.CompleteTaskRequest); ok && c.GetTaskId() == refused {
			return rpcerr.New(rpcerr.LeaseExpired, "lease expired: agent_lost")
		}
		return nil
	})
	h.start()
	api := apiClient{t: t, base: "http://" + h.agent.LocalAPIAddr()}
	var got map[string]any
	leasetest.WaitFor(t, 10*time.Second, "the refused outcome synced", func() bool {
		_, got = api.do("GET", "/api/v1/tasks/"+refused, "")
		return got["synced"] == true
	})
	note, _ := got["sync_note"].(string)
	if got["status"] != "completed" || !strings.Contains(note, "rejected by the server: 30003 lease expired: agent_lost") {
		t.Errorf("refused outcome: status %v, sync_note %q; want completed with the refusal", got["status"], got["sync_note"])
	}

	h.fake.SetFail(nil)
	delivered := h.fake.Add(shell("true"))[0]
	h.fake.WaitComplete(t, delivered, 10*time.Second)
	leasetest.WaitFor(t, 10*time.Second, "the delivered outcome synced", func() bool {
		_, got = api.do("GET", "/api/v1/tasks/"+delivered, "")
		return got["synced"] == true
	})
	if v, ok := got["sync_note"]; !ok || v != nil {
		t.Errorf("delivered outcome: sync_note %v (present %v), want null", v, ok)
	}
}

// The queue status counts processes that run: a finished attempt whose
// outcome is still on its way to the server is not one.
func TestQueueStatusDoesNotCountAnOutcomeBeingDelivered(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.LocalAPIAddr = "127.0.0.1:0" })
	delivering, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "CompleteTask" {
			once.Do(func() { close(delivering) })
			<-release
		}
		return nil
	})
	defer close(release)
	id := h.fake.Add(shell("true"))[0]
	h.start()
	select {
	case <-delivering:
	case <-time.After(10 * time.Second):
		t.Fatal("the outcome was never delivered")
	}
	api := apiClient{t: t, base: "http://" + h.agent.LocalAPIAddr()}
	if _, qs := api.do("GET", "/api/v1/queue/status", ""); qs["running"] != float64(0) {
		t.Errorf("queue status while %s's outcome is delivered: running %v, want 0", id, qs["running"])
	}
}
