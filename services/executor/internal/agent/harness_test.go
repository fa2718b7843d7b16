package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/video"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// TestMain lets the test binary act as the shim, as the taskmesh binary
// does for `taskmesh executor shim ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 3 && os.Args[1] == "executor" && os.Args[2] == "shim" && os.Args[3] == "video" {
		os.Exit(video.Main(os.Args[4:]))
	}
	if len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim" {
		os.Exit(shim.Main(os.Args[3:]))
	}
	if len(os.Args) > 2 && os.Args[1] == allocMemory {
		os.Exit(allocate(os.Args[2]))
	}
	if len(os.Args) > 1 && os.Args[1] == cgroupLimits {
		os.Exit(printCgroupLimits())
	}
	os.Exit(m.Run())
}

// shortDir is a temporary directory with a short path (unix socket paths
// are limited to 108 bytes; t.TempDir names can be long).
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tmag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type harness struct {
	t    testing.TB
	fake *leasetest.Fake
	cfg  Config
	logs *logbuf.Buffer

	agent  *Agent
	cancel context.CancelFunc
	done   chan error
}

// newHarness prepares an agent against a fresh fake server with short
// intervals; mod adjusts the config before start.
func newHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, fake: leasetest.Start(t), logs: &logbuf.Buffer{}}
	h.cfg = Config{Settings: Settings{
		AgentID: "agent-1", MachineID: "machine-1", Labels: []string{"gpu:a100"},
		Slots: 4, Server: h.fake.Addr(), Token: "agent-token-123",
		DataDir:   shortDir(t),
		ClaimWait: time.Second, HeartbeatInterval: 200 * time.Millisecond,
		RenewInterval: time.Second, GracePeriod: 2 * time.Second, OrphanGrace: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, ShimCommand: []string{os.Args[0], "executor", "shim"}}
	if mod != nil {
		mod(&h.cfg)
	}
	t.Cleanup(func() {
		h.stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", h.logs.String())
		}
	})
	return h
}

func (h *harness) start() *harness {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, h.cfg)
	if err != nil {
		cancel()
		h.t.Fatalf("new agent: %v", err)
	}
	h.agent, h.cancel, h.done = a, cancel, make(chan error, 1)
	go func() { h.done <- a.Run(ctx) }()
	return h
}

// stop stops the agent (its tasks stay with their shims).
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("agent run: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Error("agent did not stop")
	}
	h.cancel = nil
}

// row returns the journal row of a server task's current attempt.
func (h *harness) row(taskID string) journal.Task {
	h.t.Helper()
	t, err := h.agent.journal.Latest(context.Background(), taskID)
	if err != nil {
		h.t.Fatalf("journal row %s: %v", taskID, err)
	}
	return t
}

// waitRow waits until the task's journal row satisfies cond.
func (h *harness) waitRow(taskID string, limit time.Duration, what string, cond func(journal.Task) bool) journal.Task {
	h.t.Helper()
	var row journal.Task
	leasetest.WaitFor(h.t, limit, what, func() bool {
		t, err := h.agent.journal.Latest(context.Background(), taskID)
		if err != nil {
			return false
		}
		row = t
		return cond(t)
	})
	return row
}

func (h *harness) waitFinal(taskID string, limit time.Duration) journal.Task {
	h.t.Helper()
	return h.waitRow(taskID, limit, "final status of "+taskID, func(t journal.Task) bool { return journal.Final(t.Status) })
}

func shell(cmd string, args ...string) *taskv1.Task {
	return &taskv1.Task{Name: "t", Type: "shell", Command: cmd, Args: args, Timeout: 60}
}

func script(body string, args ...string) *taskv1.Task {
	return &taskv1.Task{Name: "t", Type: "script", Command: body, Args: args, Timeout: 60}
}

func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
