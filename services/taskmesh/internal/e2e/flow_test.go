package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// The README's quickstart: submit with curl-shaped JSON, a real agent runs
// it, the result comes back inline.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	key := w.s.DemoAPIKey
	id := w.submit(key, map[string]any{"name": "hello", "type": "shell", "command": "echo", "args": []string{"hello from taskmesh"}})
	done := w.waitStatus(key, id, 20*time.Second, "completed")
	if done["stdout"] != "hello from taskmesh\n" || done["exit_code"] != float64(0) || done["assigned_agent_id"] != "agent-1" {
		t.Fatalf("task = %v", done)
	}
	code, res, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	if code != 200 || res["storage_type"] != "db" || res["stdout"] != "hello from taskmesh\n" {
		t.Fatalf("result = %d %v", code, res)
	}
	waitFor(t, 10*time.Second, "the task in the list", func() bool {
		_, list, _ := w.call("GET", "/api/v1/tasks?status=completed", key, nil)
		tasks, _ := list["tasks"].([]any)
		return len(tasks) == 1
	})
}

// An agent SIGKILLed mid-task: its shim stops the orphaned process, the
// scheduler notices the missed heartbeats and leases the task to another
// agent, which completes it. The dead attempt's late completion is refused.
func TestKilledAgentsTaskRunsAgainAndCompletesOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, agentsLostFast)
	key := w.s.DemoAPIKey
	marker := filepath.Join(w.dir, "ran-once")
	pidFile := filepath.Join(w.dir, "first.pid")
	// First run: remember it ran, record its pid, then hang. Second run: finish.
	script := fmt.Sprintf(`if [ -e %[1]s ]; then echo second; exit 0; fi; touch %[1]s; echo $$ > %[2]s; exec sleep 120`, marker, pidFile)
	tokA := w.agentToken("agent-a")
	killA := w.startAgent("agent-a", tokA, 1)
	id := w.submit(key, map[string]any{"name": "survivor", "type": "script", "command": script, "lease_ttl_sec": 300})
	first := w.waitStatus(key, id, 20*time.Second, "running")
	var pid int
	waitFor(t, 10*time.Second, "the first run's pid", func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	killA()
	// How fast is a benchmark figure (taskmesh bench tasks: crash
	// recovery); here only that it happens.
	w.startAgent("agent-b", w.agentToken("agent-b"), 1)
	done := w.waitStatus(key, id, 40*time.Second, "completed")
	if done["assigned_agent_id"] != "agent-b" || done["stdout"] != "second\n" || done["retry_count"] != float64(1) {
		t.Fatalf("completed task = %v", done)
	}
	waitFor(t, 10*time.Second, "the orphaned first run to be stopped", func() bool { return !alive(pid) })
	code, body, _ := w.call("POST", "/api/v1/agent/tasks/"+id+"/complete", tokA,
		map[string]any{"agent_id": "agent-a", "attempt_id": first["attempt_id"], "exit_code": 0})
	if code != 409 || body["code"] != float64(30001) {
		t.Fatalf("late completion of the dead attempt: %d %v", code, body)
	}
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var succeeded int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = 'TaskSucceeded'`, id).Scan(&succeeded); err != nil || succeeded != 1 {
		t.Fatalf("TaskSucceeded events = %d, %v", succeeded, err)
	}
}

// pidsOf reads one pid per line.
func pidsOf(t *testing.T, path string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, 15*time.Second, "pids", func() bool {
		b, _ := os.ReadFile(path)
		pids = nil
		for _, l := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(l); err == nil {
				pids = append(pids, p)
			}
		}
		return len(pids) >= n
	})
	return pids
}

// A script whose process tree ignores nothing special: a shell with two
// background children and a grandchild.
func treeScript(pidFile string) string {
	return fmt.Sprintf(`echo $$ >> %[1]s; sleep 300 & echo $! >> %[1]s; (sleep 300 & echo $! >> %[1]s; wait) & echo $! >> %[1]s; wait`, pidFile)
}

func TestCancelAndTimeoutKillTheWholeProcessTree(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)

	cancelPids := filepath.Join(w.dir, "cancel.pids")
	id := w.submit(key, map[string]any{"name": "to-cancel", "type": "script", "command": treeScript(cancelPids), "grace_period_sec": 1})
	w.waitStatus(key, id, 20*time.Second, "running")
	pids := pidsOf(t, cancelPids, 4)
	code, body, _ := w.call("POST", "/api/v1/tasks/"+id+"/cancel", key, map[string]any{"reason": "not needed"})
	if code != 200 || body["status"] != "cancelled" {
		t.Fatalf("cancel = %d %v", code, body)
	}
	waitFor(t, 15*time.Second, "the cancelled tree to die", func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})

	timeoutPids := filepath.Join(w.dir, "timeout.pids")
	id = w.submit(key, map[string]any{"name": "too-slow", "type": "script", "command": treeScript(timeoutPids), "timeout": 2,
		"grace_period_sec": 1, "max_retries": 0})
	pids = pidsOf(t, timeoutPids, 4)
	failed := w.waitStatus(key, id, 20*time.Second, "failed")
	if !strings.Contains(fmt.Sprint(failed["error"]), "timeout") {
		t.Fatalf("timed-out task = %v", failed)
	}
	for _, p := range pids {
		if alive(p) {
			t.Fatalf("process %d of the timed-out tree still runs", p)
		}
	}
}

// The agent loses the server for a moment: the task keeps running, its
// outcome is kept locally and delivered when the connection is back.
func TestDisconnectedAgentSyncsItsResultLater(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(tm *scheduler.Timing) { tm.AgentLostAfter = 20 * time.Second })
	key := w.s.DemoAPIKey
	proxy := newProxy(t, w.s.GRPCAddr)
	w.s.GRPCAddr = proxy.addr // agents started from here on go through the proxy
	local := freeLoopbackAddr(t)
	w.startAgentSpec(agentSpec{AgentID: "agent-1", Token: w.agentToken("agent-1"), Slots: 1, LocalAPIAddr: local})
	release := filepath.Join(w.dir, "release")
	id := w.submit(key, map[string]any{"name": "offline", "type": "shell", "command": "sh",
		"args": []string{"-c", `while [ ! -e "$1" ]; do sleep 0.05; done; echo finished offline`, "offline", release}})
	w.waitStatus(key, id, 20*time.Second, "running")
	proxy.cut()
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The agent-local API shows the task ended and its outcome held back
	// (unsynced) while the server is unreachable.
	waitFor(t, 20*time.Second, "the outcome kept unsynced on the agent", func() bool {
		task, q := localGet(t, local, "/api/v1/tasks/"+id), localGet(t, local, "/api/v1/queue/status")
		return task["status"] == "completed" && task["synced"] == false && q["server_reachable"] == false && q["unsynced"] == float64(1)
	})
	if st := w.task(key, id)["status"]; st != "running" {
		t.Fatalf("status during the outage = %v", st)
	}
	proxy.restore()
	done := w.waitStatus(key, id, 30*time.Second, "completed")
	if done["stdout"] != "finished offline\n" || done["retry_count"] != float64(0) {
		t.Fatalf("synced task = %v", done)
	}
}

// A priority-1 task preempts a priority-5 one on a full single-slot agent;
// the preempted task goes back to pending and completes afterwards.
func TestPreemptedTaskIsRequeued(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	low := w.submit(key, map[string]any{"name": "low", "type": "shell", "command": "sh", "args": []string{"-c", "sleep 3; echo low done"},
		"priority": 5, "grace_period_sec": 1})
	first := w.waitStatus(key, low, 20*time.Second, "running")
	urgent := w.submit(key, map[string]any{"name": "urgent", "type": "shell", "command": "echo", "args": []string{"urgent done"}, "priority": 1})
	done := w.waitStatus(key, urgent, 30*time.Second, "completed")
	if done["stdout"] != "urgent done\n" {
		t.Fatalf("urgent = %v", done)
	}
	lowDone := w.waitStatus(key, low, 40*time.Second, "completed")
	if lowDone["attempt_id"] == first["attempt_id"] || lowDone["stdout"] != "low done\n" {
		t.Fatalf("low = %v (first attempt %v)", lowDone, first["attempt_id"])
	}
	// The audit trail shows the preemption.
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var preempted, requeued int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE event_type = 'TaskPreempted'),
		count(*) FILTER (WHERE event_type = 'TaskRequeued') FROM events WHERE aggregate_id = $1`, low).Scan(&preempted, &requeued); err != nil ||
		preempted != 1 || requeued != 1 {
		t.Fatalf("preempted %d, requeued %d, %v", preempted, requeued, err)
	}
}

// A result of 64 KiB or more goes to the object store; the result API
// answers with a presigned link that serves it.
func TestLargeResultThroughTheObjectStore(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	id := w.submit(key, map[string]any{"name": "big", "type": "shell", "command": "sh", "args": []string{"-c", "head -c 300000 /dev/zero | tr '\\0' x"}})
	w.waitStatus(key, id, 30*time.Second, "completed")
	code, res, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	if code != 200 || res["storage_type"] != "s3" || res["expires_in"] != float64(3600) {
		t.Fatalf("result = %d %v", code, res)
	}
	resp, err := http.Get(res["presigned_url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var obj struct {
		Stdout string `json:"stdout"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &obj) != nil || len(obj.Stdout) != 300000 || strings.Trim(obj.Stdout, "x") != "" {
		t.Fatalf("download: %d, %d bytes of stdout", resp.StatusCode, len(obj.Stdout))
	}
	// The link is signed: a changed key is refused.
	tampered := strings.Replace(res["presigned_url"].(string), id, "other", 1)
	if r, err := http.Get(tampered); err != nil || r.StatusCode != 403 {
		t.Fatalf("tampered link: %v %v", r.StatusCode, err)
	}
}

// Output with NUL bytes, small (inline) and large (the object store, its
// tail inline): the API refuses a NUL in any string, so the agent sends
// each as U+FFFD, the tasks complete, and the outcomes after them are not
// held up behind a refused one.
func TestOutputWithNULBytesCompletes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	small := w.submit(key, map[string]any{"name": "nul", "type": "script", "command": `printf 'a\000b\n'`})
	large := w.submit(key, map[string]any{"name": "zeros", "type": "shell", "command": "head", "args": []string{"-c", "100000", "/dev/zero"}})
	after := w.submit(key, map[string]any{"name": "after", "type": "shell", "command": "echo", "args": []string{"after"}})
	if done := w.waitStatus(key, small, 30*time.Second, "completed"); done["stdout"] != "a\uFFFDb\n" {
		t.Fatalf("small: stdout %q", done["stdout"])
	}
	w.waitStatus(key, large, 30*time.Second, "completed")
	code, res, _ := w.call("GET", "/api/v1/tasks/"+large+"/result", key, nil)
	if code != 200 || res["storage_type"] != "s3" {
		t.Fatalf("large result = %d %v", code, res)
	}
	if done := w.waitStatus(key, after, 30*time.Second, "completed"); done["stdout"] != "after\n" {
		t.Fatalf("after: stdout %q", done["stdout"])
	}
}

// freeLoopbackAddr is a 127.0.0.1 address with a port free now, for a
// child process to listen on.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// localGet reads an agent-local API path; nil while the agent is not
// listening yet.
func localGet(t *testing.T, addr, path string) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]any{}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return nil
	}
	return out
}

// A server task cancelled through its agent's local API ends cancelled
// on the server as well: it is not retried as a failure, and its
// dependents are cancelled as after a cancel through the task API.
func TestServerTaskCancelledOnItsAgentEndsCancelled(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	local := freeLoopbackAddr(t)
	w.startAgentSpec(agentSpec{AgentID: "agent-lc", Token: w.agentToken("agent-lc"), Slots: 2, LocalAPIAddr: local})
	id := w.submit(key, map[string]any{"name": "long", "type": "shell", "command": "sleep", "args": []string{"60"},
		"max_retries": 3, "retry_delay": 0, "grace_period_sec": 1})
	dependent := w.submit(key, map[string]any{"name": "after", "type": "shell", "command": "true", "depends_on": []string{id}})
	w.waitStatus(key, id, 30*time.Second, "running")
	waitFor(t, 10*time.Second, "the agent-local API", func() bool { return localGet(t, local, "/api/v1/tasks/"+id) != nil })
	resp, err := http.Post("http://"+local+"/api/v1/tasks/"+id+"/cancel", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("local cancel = %d", resp.StatusCode)
	}
	done := w.waitStatus(key, id, 20*time.Second, "cancelled", "pending", "failed")
	if done["status"] != "cancelled" || done["retry_count"] != float64(0) || !strings.Contains(fmt.Sprint(done["error"]), "agent-local API") {
		t.Fatalf("server task after the local cancel = %v", done)
	}
	w.waitStatus(key, dependent, 20*time.Second, "cancelled")
	// It stays cancelled: nothing runs it again.
	time.Sleep(2 * time.Second)
	if st := w.task(key, id)["status"]; st != "cancelled" {
		t.Fatalf("status two seconds later = %v", st)
	}
}
