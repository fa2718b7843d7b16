package shim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stubborn traps SIGTERM and runs on: only SIGKILL ends it, like a task
// that ignores its stop.
var stubborn = []string{"sh", "-c", `trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done`}

// killedAfterTerm checks that a task that ignores SIGTERM was stopped for
// reason: SIGTERM first, then SIGKILL, and nothing of its group is left.
func killedAfterTerm(t *testing.T, r *run, st Status, reason string) {
	t.Helper()
	if st.Stop != reason || st.SignalName != "SIGKILL" {
		t.Fatalf("status = %+v, want stopped %q by SIGKILL", st, reason)
	}
	out, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
	if !strings.Contains(string(out), "got-term") {
		t.Errorf("stdout %q: SIGTERM was not delivered first", out)
	}
	if !groupGone(r.started.PID) {
		t.Error("process group still has members")
	}
}

func waitReady(t *testing.T, r *run) {
	t.Helper()
	waitFor(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
		return strings.Contains(string(b), "ready")
	})
}

// A fenced task whose fence is not renewed is killed FenceGrace after its
// SIGTERM, not after its own (long) grace, with its agent still attached:
// an agent that is stopped or cut off holds its connections open.
func TestFenceNotRenewedKillsTheTask(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, stubborn, func(s *Spec) {
			s.Grace = 30 * time.Second
			s.Fence, s.FenceGrace = 500*time.Millisecond, 300*time.Millisecond
		})
		if err != nil {
			t.Fatal(err)
		}
		st := r.wait(t, 20*time.Second)
		killedAfterTerm(t, r, st, StopFenced)
		if ran := st.EndedAt.Sub(st.StartedAt); ran > 10*time.Second {
			t.Errorf("ran %s: the task's 30 s grace was waited, not the fence's", ran)
		}
	})
}

// Renewals keep a fenced task running past its first fence; once they
// stop, the fence passes and the task is stopped.
func TestRenewedFenceKeepsTheTaskRunning(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		const fence = 400 * time.Millisecond
		r, err := launch(t, stubborn, func(s *Spec) { s.Fence, s.FenceGrace = fence, 100*time.Millisecond })
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, r)
		ctx := context.Background()
		for end := time.Now().Add(4 * fence); time.Now().Before(end); time.Sleep(fence / 4) {
			st, err := r.sess.Fence(ctx, fence)
			if err != nil {
				t.Fatalf("renewal: %v", err)
			}
			if !st.Running || st.Stopping != "" {
				t.Fatalf("state after renewals = %+v, want running", st)
			}
		}
		st := r.wait(t, 10*time.Second)
		if st.Stop != StopFenced {
			t.Fatalf("stop = %q once renewals stopped, want %q", st.Stop, StopFenced)
		}
	})
}

// A stop under way with a long grace — here the orphan's, after the agent
// went away — is hurried by the fence: SIGKILL comes FenceGrace after the
// fence, and the first stop's reason stays the one recorded.
func TestFenceHurriesAStopUnderWay(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, stubborn, func(s *Spec) {
			s.Grace = 30 * time.Second
			s.OrphanGrace = 200 * time.Millisecond
			s.Fence, s.FenceGrace = time.Second, 200*time.Millisecond
		})
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, r)
		r.sess.Close()
		waitFor(t, func() bool { _, ok, _ := ReadStatus(r.dir); return ok })
		st, _, _ := ReadStatus(r.dir)
		if st.Stop != StopOrphaned || st.SignalName != "SIGKILL" {
			t.Fatalf("status = %+v, want orphaned, then SIGKILL", st)
		}
		if ran := st.EndedAt.Sub(st.StartedAt); ran > 10*time.Second {
			t.Errorf("ran %s: the stop's 30 s grace was waited, not the fence's", ran)
		}
		if !groupGone(r.started.PID) {
			t.Error("process group still has members")
		}
	})
}

// A stop whose own kill comes sooner than the fence's keeps it.
func TestFenceDoesNotDelayAStopUnderWay(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, stubborn, func(s *Spec) { s.Fence, s.FenceGrace = 200*time.Millisecond, 30*time.Second })
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, r)
		if _, err := r.sess.Stop(context.Background(), "cancelled", 0); err != nil {
			t.Fatal(err)
		}
		st := r.wait(t, 20*time.Second)
		if st.Stop != "cancelled" || st.SignalName != "SIGKILL" {
			t.Fatalf("status = %+v, want cancelled by SIGKILL", st)
		}
		if ran := st.EndedAt.Sub(st.StartedAt); ran > 10*time.Second {
			t.Errorf("ran %s: the fence's 30 s grace replaced the stop's 0", ran)
		}
	})
}

// Renewals that cannot be honoured are refused, and say why.
func TestFenceRenewalsRefused(t *testing.T) {
	ctx := context.Background()
	t.Run("no fence", func(t *testing.T) {
		r, err := launch(t, []string{"sleep", "30"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.sess.Fence(ctx, time.Minute); err == nil || !strings.Contains(err.Error(), "has none") {
			t.Fatalf("renewal of a task without a fence: err = %v", err)
		}
		if st, err := r.sess.State(ctx); err != nil || !st.Running {
			t.Fatalf("state = %+v, %v: the refused renewal changed the task", st, err)
		}
	})
	t.Run("no length", func(t *testing.T) {
		r, err := launch(t, []string{"sleep", "30"}, func(s *Spec) { s.Fence = time.Minute })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.sess.request(ctx, Request{Op: OpFence}); err == nil || !strings.Contains(err.Error(), "no length") {
			t.Fatalf("fence without a length: err = %v", err)
		}
	})
	t.Run("too late", func(t *testing.T) {
		r, err := launch(t, stubborn, func(s *Spec) { s.Fence, s.FenceGrace = 100*time.Millisecond, 5*time.Second })
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { st, _ := r.sess.State(ctx); return st.Stopping != "" })
		if _, err := r.sess.Fence(ctx, time.Minute); err == nil || !strings.Contains(err.Error(), "passed") {
			t.Fatalf("renewal after the fence passed: err = %v", err)
		}
		if st := r.wait(t, 20*time.Second); st.Stop != StopFenced {
			t.Fatalf("stop = %q, want %q: a late renewal saved the task", st.Stop, StopFenced)
		}
	})
}
