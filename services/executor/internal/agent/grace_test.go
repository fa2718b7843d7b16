package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"google.golang.org/protobuf/proto"
)

// trapTerm ignores SIGTERM (it says so) and runs until SIGKILL; it touches
// $1 once its trap is set.
const trapTerm = `trap 'echo got-term' TERM; touch "$1"; while :; do sleep 0.05; done`

// longGrace is an agent default far longer than any of these tests may
// take: a task that waits for it was given the default instead of its 0.
func longGrace(c *Config) { c.GracePeriod = 30 * time.Second }

// killedAtOnce checks that a task ended by SIGKILL right after SIGTERM.
func killedAtOnce(t *testing.T, row journal.Task, took, within time.Duration) {
	t.Helper()
	if took > within {
		t.Errorf("task ended %s after the stop: grace_period_sec 0 waited for a grace", took)
	}
	if row.ExitCode == nil || *row.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code = %v, want SIGKILL", row.ExitCode)
	}
	if !groupGone(row.PID) {
		t.Error("process group survived")
	}
}

// grace_period_sec 0 is no grace ("Stopping" in
// docs/executor.md#how-a-task-runs): a server task's timeout kills it
// right after SIGTERM, not after the agent's default.
func TestZeroGraceTimeoutKillsAtOnce(t *testing.T) {
	h := newHarness(t, longGrace).start()
	ready := filepath.Join(shortDir(t), "ready")
	task := script(trapTerm, ready)
	task.Timeout, task.GracePeriodSec = 2, 0
	id := h.fake.Add(task)[0]
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })
	begin := time.Now()
	done := h.fake.WaitComplete(t, id, 25*time.Second)
	if !strings.Contains(done.GetError(), "timeout after 2s") {
		t.Errorf("completion error %q, want the timeout", done.GetError())
	}
	killedAtOnce(t, h.row(id), time.Since(begin), 6*time.Second)
}

// A server stop (cancel, preemption, suspension) of a task with grace 0
// kills at once too.
func TestZeroGraceServerStopKillsAtOnce(t *testing.T) {
	h := newHarness(t, longGrace).start()
	ready := filepath.Join(shortDir(t), "ready")
	id := h.fake.Add(script(trapTerm, ready))[0]
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })
	begin := time.Now()
	h.fake.StopOnHeartbeat(id, "preempted", 0)
	row := h.waitRow(id, 25*time.Second, "final", func(r journal.Task) bool { return journal.Final(r.Status) })
	if row.Status != journal.StatusPreempted {
		t.Errorf("status %s, want preempted", row.Status)
	}
	killedAtOnce(t, row, time.Since(begin), 5*time.Second)
}

// A local task takes grace_period_sec 0 as given; one that gives none
// gets the agent's default, recorded with it.
func TestLocalZeroGraceCancelKillsAtOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) { longGrace(c); c.Server = "" }).start()
	ctx := context.Background()
	ready := filepath.Join(shortDir(t), "ready")
	local, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "zero", Type: "script", Command: trapTerm,
		Args: []string{ready}, GracePeriodSec: proto.Int32(0)})
	if err != nil {
		t.Fatal(err)
	}
	if local.GracePeriodSec != 0 {
		t.Errorf("accepted with grace %d, want 0", local.GracePeriodSec)
	}
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })
	begin := time.Now()
	if _, err := h.agent.Cancel(ctx, local.ID, nil); err != nil {
		t.Fatal(err)
	}
	row := h.waitFinal(local.ID, 25*time.Second)
	if row.Status != journal.StatusCancelled {
		t.Errorf("status %s, want cancelled", row.Status)
	}
	killedAtOnce(t, row, time.Since(begin), 5*time.Second)

	dflt, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "default", Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if dflt.GracePeriodSec != 30 {
		t.Errorf("a local task without grace_period_sec got %d, want the agent's 30", dflt.GracePeriodSec)
	}
}
