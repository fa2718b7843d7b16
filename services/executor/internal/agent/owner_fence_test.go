package agent

import (
	"context"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/localapi"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// ignoresTerm runs for a minute and ignores SIGTERM, as its sleep does
// (an ignored signal stays ignored across exec): only the SIGKILL after
// the fence's grace stops it.
const ignoresTerm = `trap '' TERM; sleep 60`

// TestLocalTaskStopsWhenItsCreatorStopsRenewing: a local task created
// with a fence, whose creator never renews it, is stopped once the fence
// passes and killed its grace later, even with its agent stopped
// meanwhile (the shim holds the fence); the agent back reports it failed,
// fenced by its creator.
func TestLocalTaskStopsWhenItsCreatorStopsRenewing(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	const length, grace = 1500 * time.Millisecond, 300 * time.Millisecond
	submitted := time.Now()
	task, err := h.agent.SubmitWithFence(context.Background(), &taskv1.TaskSpec{Name: "placed", Type: "script", Command: ignoresTerm},
		localapi.Fence{Length: length, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	if task.OwnerFence != length || task.OwnerFenceGrace != grace {
		t.Fatalf("journal keeps fence %s grace %s, want %s and %s", task.OwnerFence, task.OwnerFenceGrace, length, grace)
	}
	row := h.waitRow(task.ID, 10*time.Second, "running", func(r journal.Task) bool { return r.PID != 0 })
	h.stop()
	leasetest.WaitFor(t, length+grace+5*time.Second, "the task killed", func() bool { return groupGone(row.PID) })
	if took := time.Since(submitted); took < length+grace {
		t.Fatalf("the task was killed %s after its creation, before its fence and grace (%s)", took, length+grace)
	}
	h.start()
	done := h.waitFinal(task.ID, 15*time.Second)
	if done.Status != journal.StatusFailed || done.Error != fence.OwnerMessage {
		t.Fatalf("status %s error %q, want failed with %q", done.Status, done.Error, fence.OwnerMessage)
	}
}

// TestRenewedFenceKeepsALocalTaskRunning: renewed before each renewal
// runs out, a fenced local task runs to its end, well past the fence it
// was created with; a renewal of the ended task answers it as it ended.
// Renewing a task created without a fence, or an unknown one, is refused.
func TestRenewedFenceKeepsALocalTaskRunning(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	ctx := context.Background()
	const length = time.Second
	task, err := h.agent.SubmitWithFence(ctx, &taskv1.TaskSpec{Name: "followed", Type: "script", Command: `sleep 3; echo ok`},
		localapi.Fence{Length: length})
	if err != nil {
		t.Fatal(err)
	}
	if task.OwnerFenceGrace != h.agent.cfg.fenceGrace {
		t.Fatalf("grace %s, want the agent's own %s", task.OwnerFenceGrace, h.agent.cfg.fenceGrace)
	}
	deadline := time.Now().Add(20 * time.Second)
	var last journal.Task
	for time.Now().Before(deadline) {
		if last, err = h.agent.RenewFence(ctx, task.ID, length); err != nil {
			t.Fatalf("renew: %v", err)
		}
		if journal.Final(last.Status) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if last.Status != journal.StatusCompleted || last.Stdout != "ok\n" {
		t.Fatalf("renewals answered status %s stdout %q error %q, want completed with ok", last.Status, last.Stdout, last.Error)
	}

	plain, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "plain", Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.agent.RenewFence(ctx, plain.ID, length); rpcerr.FromGRPC(err) != rpcerr.InvalidArgument {
		t.Fatalf("renewing a task without a fence: %v, want 30005", err)
	}
	if _, err := h.agent.RenewFence(ctx, "no-such-task", length); rpcerr.FromGRPC(err) != rpcerr.TaskNotFound {
		t.Fatalf("renewing an unknown task: %v, want 30004", err)
	}
}

// TestFencedLocalTaskWaitsForItsCreatorAfterARestart: the deadline of a
// task still waiting in the queue is not kept across the agent's
// restart, so it starts only once its creator renews the fence, and
// fails fenced without having run when no renewal comes within the
// fence it was created with.
func TestFencedLocalTaskWaitsForItsCreatorAfterARestart(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 1 })
	h.start()
	ctx := context.Background()
	blocker, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "blocker", Type: "script", Command: `sleep 60`})
	if err != nil {
		t.Fatal(err)
	}
	h.waitRow(blocker.ID, 10*time.Second, "blocker running", func(r journal.Task) bool { return r.PID != 0 })
	const length = 1500 * time.Millisecond
	renewed, err := h.agent.SubmitWithFence(ctx, &taskv1.TaskSpec{Name: "renewed", Command: "echo", Args: []string{"ran"}}, localapi.Fence{Length: length})
	if err != nil {
		t.Fatal(err)
	}
	abandoned, err := h.agent.SubmitWithFence(ctx, &taskv1.TaskSpec{Name: "abandoned", Command: "echo", Args: []string{"ran"}, Priority: ptr32(1)},
		localapi.Fence{Length: length})
	if err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.start()
	leasetest.WaitFor(t, 10*time.Second, "the blocker cancelled", func() bool {
		_, err := h.agent.Cancel(ctx, blocker.ID, nil)
		return err == nil
	})
	// The slot's first task (priority 1) waits for a renewal that never
	// comes, without starting, and fails fenced once its fence has
	// passed since the restart.
	time.Sleep(500 * time.Millisecond)
	if r := h.row(abandoned.ID); r.Status != journal.StatusRunning || r.PID != 0 {
		t.Fatalf("without a renewal the task is %s with pid %d, want running (in its slot) and not started", r.Status, r.PID)
	}
	done := h.waitFinal(abandoned.ID, 15*time.Second)
	if done.Status != journal.StatusFailed || done.Error != fence.OwnerMessage || done.Stdout != "" || done.PID != 0 {
		t.Fatalf("abandoned task: status %s stdout %q pid %d error %q, want failed with %q, never started",
			done.Status, done.Stdout, done.PID, done.Error, fence.OwnerMessage)
	}
	// The next waits too, and runs once its creator renews it.
	h.waitRow(renewed.ID, 10*time.Second, "renewed task in its slot", func(r journal.Task) bool { return r.Status == journal.StatusRunning })
	time.Sleep(300 * time.Millisecond)
	if r := h.row(renewed.ID); r.PID != 0 {
		t.Fatal("the task started before its creator renewed the fence")
	}
	if _, err := h.agent.RenewFence(ctx, renewed.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if done := h.waitFinal(renewed.ID, 15*time.Second); done.Status != journal.StatusCompleted || done.Stdout != "ran\n" {
		t.Fatalf("renewed task: status %s stdout %q error %q, want completed", done.Status, done.Stdout, done.Error)
	}
}

func ptr32(v int32) *int32 { return &v }
