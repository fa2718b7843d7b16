package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/sibling"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/proto"
)

// Short tasks (shorter than AheadBelow: a minute here, so that a loaded
// machine cannot make them long): once the agent has seen a few, it
// claims beyond its free slots, every task still runs once, and each attempt's StartTask reaches
// the server before its CompleteTask although it went alongside the spawn.
func TestClaimsAheadWhileTasksAreShort(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 2; c.ClaimAhead = 2; c.AheadBelow = time.Minute })
	var ids []string
	for range 16 {
		ids = append(ids, h.fake.Add(shell("sleep", "0.2"))...)
	}
	h.start()
	// A task claimed while both slots are busy waits for one.
	leasetest.WaitFor(t, 30*time.Second, "a task claimed ahead, waiting for a slot", func() bool { return h.agent.queued.Load() > 0 })
	for _, id := range ids {
		if c := h.fake.WaitComplete(t, id, 30*time.Second); c.GetExitCode() != 0 {
			t.Fatalf("task %s exit code %d", id, c.GetExitCode())
		}
	}
	calls := h.fake.Calls("")
	for _, id := range ids {
		start := slices.IndexFunc(calls, func(c leasetest.Call) bool { return c.Method == "StartTask" && taskOf(c) == id })
		done := slices.IndexFunc(calls, func(c leasetest.Call) bool { return c.Method == "CompleteTask" && taskOf(c) == id })
		if start < 0 || done < 0 || start > done {
			t.Fatalf("task %s: StartTask at %d, CompleteTask at %d; want start first", id, start, done)
		}
		if n := len(slices.DeleteFunc(slices.Clone(calls), func(c leasetest.Call) bool { return c.Method != "CompleteTask" || taskOf(c) != id })); n != 1 {
			t.Errorf("task %s completed %d times", id, n)
		}
	}
}

// The moving average of run times decides: no history, or tasks that run
// long, claim only for free slots; short ones claim ahead up to the slots,
// less what already waits.
func TestAheadRoomFollowsRunTimes(t *testing.T) {
	a := &Agent{cfg: Config{Settings: Settings{Slots: 4}, AheadBelow: DefaultAheadBelow}, aheadWake: make(chan struct{}, 1)}
	a.ranFor(time.Millisecond)
	if n := a.aheadRoom(); n != 0 {
		t.Errorf("ClaimAhead 0 (the default): ahead %d, want 0", n)
	}
	a.runTime.Store(0)
	a.cfg.ClaimAhead = 4
	if n := a.aheadRoom(); n != 0 {
		t.Errorf("no run seen yet: ahead %d, want 0", n)
	}
	a.ranFor(10 * time.Millisecond)
	if n := a.aheadRoom(); n != 4 {
		t.Errorf("short tasks: ahead %d, want 4", n)
	}
	select {
	case <-a.aheadWake:
	default:
		t.Error("tasks turned short without waking the claim loop")
	}
	a.queued.Store(3)
	if n := a.aheadRoom(); n != 1 {
		t.Errorf("3 waiting: ahead %d, want 1", n)
	}
	for range 10 {
		a.ranFor(5 * time.Second)
	}
	if n := a.aheadRoom(); n != 0 {
		t.Errorf("long tasks: ahead %d, want 0", n)
	}
}

// StartTask sent alongside the spawn is refused (the task was cancelled
// between claim and start): the process already started is stopped at
// once and the attempt ends as the server decided, with no CompleteTask.
func TestStartRefusedAlongsideStopsTheProcess(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GracePeriod = time.Second })
	h.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "StartTask" {
			time.Sleep(300 * time.Millisecond) // answered after the process started
			return rpcerr.New(rpcerr.TaskImmutable, "task is cancelled")
		}
		return nil
	})
	id := h.fake.Add(shell("sleep", "30"))[0]
	h.start()
	begin := time.Now()
	row := h.waitRow(id, 10*time.Second, "final and synced", func(r journal.Task) bool { return journal.Final(r.Status) && r.Synced })
	if took := time.Since(begin); took > 8*time.Second {
		t.Errorf("stopping took %s", took)
	}
	if row.Status != journal.StatusCancelled || !strings.HasPrefix(row.Error, "task is final on the server: 30002") {
		t.Errorf("row status %s error %q, want cancelled, task is final", row.Status, row.Error)
	}
	if row.PID == 0 || !groupGone(row.PID) {
		t.Errorf("process %d: want one started and stopped", row.PID)
	}
	if n := len(h.fake.Calls("CompleteTask")); n != 0 {
		t.Errorf("%d CompleteTask calls for a task the server had cancelled", n)
	}
}

// The shim binary beside the agent's executable is used; --shim must name
// a program; without either the agent re-executes itself.
func TestShimBinaryDefaults(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "taskmesh")
	if sibling.Of(exe, ShimBinary) != "" {
		t.Error("found a shim binary in an empty directory")
	}
	shimPath := filepath.Join(dir, ShimBinary)
	if err := os.WriteFile(shimPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := sibling.Of(exe, ShimBinary); got != shimPath {
		t.Errorf("beside %s: %q, want %q", exe, got, shimPath)
	}
	c := Config{Settings: Settings{ShimPath: shimPath}}
	if err := c.shimDefaults(); err != nil || !slices.Equal(c.ShimCommand, []string{shimPath}) || len(c.RunnerCommand) != 3 || c.RunnerCommand[1] != "executor" {
		t.Errorf("ShimPath set: err %v, shim %q, runner %q", err, c.ShimCommand, c.RunnerCommand)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), dir} {
		c := Config{Settings: Settings{ShimPath: bad}}
		if err := c.shimDefaults(); err == nil || !strings.Contains(err.Error(), "shim binary") {
			t.Errorf("ShimPath %s: err %v, want a shim binary error", bad, err)
		}
	}
	if err := os.Chmod(shimPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := sibling.Of(exe, ShimBinary); got != "" {
		t.Errorf("a file that is not executable was taken as the shim: %q", got)
	}
}

// taskOf is the task id of a recorded StartTask or CompleteTask call.
func taskOf(c leasetest.Call) string {
	switch r := c.Req.(type) {
	case *taskv1.StartTaskRequest:
		return r.GetTaskId()
	case *taskv1.CompleteTaskRequest:
		return r.GetTaskId()
	}
	return ""
}
