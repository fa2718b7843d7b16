package agent

import (
	"os"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
)

// The agent can die after it journaled a task's run directory and told the
// server the task started, but before a shim started the task. Here its
// "shim" never becomes ready and the agent is stopped while it waits. The
// restarted agent finds no shim alive and no trace of a spawn in the run
// directory, so it starts the task under the same attempt instead of
// reporting the process lost.
func TestRecoveryStartsATaskThatNoShimStarted(t *testing.T) {
	realShim := []string{os.Args[0], "executor", "shim"}
	h := newHarness(t, func(c *Config) {
		// A "shim" that never reports ready (and never takes the run
		// directory's lock); the extra arguments Start appends land in $0 and beyond.
		c.ShimCommand = []string{"/bin/sh", "-c", "exec sleep 20", "stuck-shim"}
	})
	h.start()
	id := h.fake.Add(shell("echo", "ran once"))[0]
	row := h.waitRow(id, 15*time.Second, "run directory journaled", func(r journal.Task) bool { return r.RunDir != "" })
	h.stop()

	h.cfg.ShimCommand = realShim
	h.start()
	c := h.fake.WaitComplete(t, id, 20*time.Second)
	if c.GetAttemptId() != row.AttemptID {
		t.Fatalf("completed by attempt %s, want the recovered %s", c.GetAttemptId(), row.AttemptID)
	}
	if c.GetExitCode() != 0 || c.GetError() != "" || c.GetStdout() != "ran once\n" {
		t.Fatalf("outcome: exit %d stdout %q error %q, want a clean exit with the task's output", c.GetExitCode(), c.GetStdout(), c.GetError())
	}
	if n := len(h.fake.Calls("CompleteTask")); n != 1 {
		t.Fatalf("%d CompleteTask calls, want 1", n)
	}
}
