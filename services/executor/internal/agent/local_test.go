package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"google.golang.org/protobuf/proto"
)

// TestLocalQueueSurvivesRestart runs an agent without a server: one slot,
// a running local task and a pending one. After a restart the running one
// is reattached and the pending one runs.
func TestLocalQueueSurvivesRestart(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Server = ""; c.Slots = 1; c.OrphanGrace = 10 * time.Second })
	h.start()
	gate := filepath.Join(shortDir(t), "go")
	ctx := context.Background()
	first, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "first", Type: "script",
		Command: `while [ ! -e "$1" ]; do sleep 0.05; done; echo first`, Args: []string{gate}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "second", Command: "echo", Args: []string{"second"},
		Priority: proto.Int32(9)})
	if err != nil {
		t.Fatal(err)
	}
	h.waitRow(first.ID, 10*time.Second, "first running", func(r journal.Task) bool { return r.PID != 0 })
	if row := h.row(second.ID); row.Status != journal.StatusPending {
		t.Fatalf("second task is %s while the only slot is busy", row.Status)
	}
	h.stop()

	h.start()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, stdout string }{{first.ID, "first\n"}, {second.ID, "second\n"}} {
		row := h.waitFinal(tc.id, 15*time.Second)
		if row.Status != journal.StatusCompleted || row.Stdout != tc.stdout || !row.Synced || row.Origin != journal.OriginLocal {
			t.Errorf("%s: status %s stdout %q synced %v", tc.id, row.Status, row.Stdout, row.Synced)
		}
	}
	st, err := h.agent.Status(ctx)
	if err != nil || st.ServerReachable || st.Unsynced != 0 || st.Pending != 0 {
		t.Errorf("status = %+v, %v", st, err)
	}
	leasetest.WaitFor(t, 5*time.Second, "run dirs removed", func() bool {
		entries, _ := os.ReadDir(filepath.Join(h.cfg.DataDir, "runs"))
		return len(entries) == 0
	})
}

// A local task has no lease another agent could take: it outlives its
// agent for as long as the agent is away, past the orphan grace, and the
// agent back reads its outcome.
func TestLocalTaskOutlivesItsAgentPastTheOrphanGrace(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.OrphanGrace = 300 * time.Millisecond })
	h.start()
	gate := filepath.Join(shortDir(t), "go")
	task, err := h.agent.Submit(context.Background(), &taskv1.TaskSpec{Name: "long", Type: "script",
		Command: `while [ ! -e "$1" ]; do sleep 0.05; done; echo done`, Args: []string{gate}})
	if err != nil {
		t.Fatal(err)
	}
	row := h.waitRow(task.ID, 10*time.Second, "running", func(r journal.Task) bool { return r.PID != 0 })
	h.stop()
	time.Sleep(5 * h.cfg.OrphanGrace)
	if !alive(row.PID) {
		t.Fatal("the local task was stopped when its agent had been gone for the orphan grace")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.start()
	done := h.waitFinal(task.ID, 15*time.Second)
	if done.Status != journal.StatusCompleted || done.Stdout != "done\n" {
		t.Errorf("status %s stdout %q error %q, want completed", done.Status, done.Stdout, done.Error)
	}
}

// TestLocalTaskEndsALongPoll: an idle agent's claim holds every slot while
// it long-polls the server. A local task submitted then starts at once —
// the claim is ended and asked again with its request id and no wait —
// not when the poll's wait runs out; server work is still claimed after.
func TestLocalTaskEndsALongPoll(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 1; c.ClaimWait = 30 * time.Second })
	h.start()
	leasetest.WaitFor(t, 10*time.Second, "a parked claim", func() bool { return h.fake.Parked() == 1 })
	submitted := time.Now()
	local, err := h.agent.Submit(context.Background(), &taskv1.TaskSpec{Name: "local", Command: "echo", Args: []string{"local"}})
	if err != nil {
		t.Fatal(err)
	}
	row := h.waitFinal(local.ID, 10*time.Second)
	if row.Status != journal.StatusCompleted || row.Stdout != "local\n" {
		t.Fatalf("local task: status %s stdout %q", row.Status, row.Stdout)
	}
	if took := time.Since(submitted); took > 5*time.Second {
		t.Errorf("the local task took %s: it waited for the claim's long poll", took)
	}
	calls := h.fake.Calls("ClaimTasks")
	var polled, again *taskv1.ClaimTasksRequest
	for i, c := range calls {
		if r := c.Req.(*taskv1.ClaimTasksRequest); r.GetWait().AsDuration() == 0 && i > 0 {
			polled, again = calls[i-1].Req.(*taskv1.ClaimTasksRequest), r
			break
		}
	}
	if again == nil || polled.GetRequestId() != again.GetRequestId() {
		t.Errorf("the interrupted claim was not asked again with its request id: %v then %v", polled, again)
	}

	id := h.fake.Add(shell("echo", "server"))[0]
	if done := h.fake.WaitComplete(t, id, 10*time.Second); done.GetExitCode() != 0 || done.GetStdout() != "server\n" {
		t.Errorf("server task after the local one = %v", done)
	}
}

// TestQueuedLocalTaskTakesTheFirstFreedSlot: with every slot busy, the
// claim loop waits for a slot too. A local task queued then takes the
// first slot that frees — it does not lose it to a claim that would hold
// it for a whole long poll — and server work still comes after.
func TestQueuedLocalTaskTakesTheFirstFreedSlot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 2; c.ClaimWait = 30 * time.Second })
	h.start()
	submit := func(name string, args ...string) journal.Task {
		t.Helper()
		row, err := h.agent.Submit(context.Background(), &taskv1.TaskSpec{Name: name, Command: args[0], Args: args[1:]})
		if err != nil {
			t.Fatal(err)
		}
		return row
	}
	long := submit("long", "sleep", "60")
	defer func() { _, _ = h.agent.Cancel(context.Background(), long.ID, nil) }()
	for round := range 3 {
		short := submit("short", "sleep", "0.5")
		leasetest.WaitFor(t, 10*time.Second, "both slots busy", func() bool {
			st, err := h.agent.Status(context.Background())
			return err == nil && st.Running == 2
		})
		queued := submit("queued", "echo", "queued")
		h.waitFinal(short.ID, 10*time.Second)
		freed := time.Now()
		if row := h.waitFinal(queued.ID, 20*time.Second); row.Status != journal.StatusCompleted {
			t.Fatalf("round %d: the queued task ended %s", round, row.Status)
		}
		if took := time.Since(freed); took > 5*time.Second {
			t.Fatalf("round %d: the queued task started %s after a slot freed: a claim took the slot", round, took)
		}
	}
	id := h.fake.Add(shell("echo", "server"))[0]
	if done := h.fake.WaitComplete(t, id, 40*time.Second); done.GetStdout() != "server\n" {
		t.Errorf("server task after the local ones = %v", done)
	}
}
