package domain

import (
	"errors"
	"testing"
	"time"
)

func TestSuspendAndResume(t *testing.T) {
	queued := Fold(Submit(t0, "task-1", "tenant-a", "key-1", "", "", spec(t, nil), "cq-a"))
	queued = Apply(queued, Record{At: t0, Event: Admitted{ClusterQueue: "cq-a"}})
	running := leased(t, nil)
	recs, err := running.Start(t0.Add(2*time.Second), "agent-1", "att-1")
	running = run(t, running, recs, err)

	tests := map[string]struct {
		task     Task
		stopWhy  string // what the attempt's agent is told at its heartbeat
		attempt  string
		admitted bool
	}{
		"pending is held":         {task: queued},
		"running is told to stop": {task: running, stopWhy: "suspended", attempt: "att-1"},
	}
	for name, tt := range tests {
		recs, err := tt.task.Suspend(t0.Add(3*time.Second), "user-a", "maintenance")
		s := run(t, tt.task, recs, err)
		if s.Status != StatusSuspended || s.Admitted || s.Claimable(t0.Add(time.Hour)) || s.AttemptID != tt.attempt {
			t.Fatalf("%s: suspended = %+v", name, s)
		}
		if tt.stopWhy != "" {
			if stop, why := s.MustStop(tt.attempt); !stop || why != tt.stopWhy {
				t.Fatalf("%s: must stop = %v %s", name, stop, why)
			}
		}
		if _, err := s.Suspend(t0, "user-a", ""); !errors.Is(err, ErrImmutable) {
			t.Fatalf("%s: suspend twice: %v", name, err)
		}
		recs, err = s.Resume(t0.Add(4*time.Second), "user-a")
		r := run(t, s, recs, err)
		if r.Status != StatusPending || r.AttemptID != "" || !r.RetryAt.Equal(t0.Add(4*time.Second)) {
			t.Fatalf("%s: resumed = %+v", name, r)
		}
		// Resumed into a ClusterQueue, the task waits for admission again.
		if tt.task.ClusterQueue != "" && (!r.AwaitingAdmission() || r.AdmissionEpoch != r.Version) {
			t.Fatalf("%s: resumed without a new stay in its queue: %+v", name, r)
		}
		if _, err := r.Resume(t0, "user-a"); !errors.Is(err, ErrImmutable) {
			t.Fatalf("%s: resume a pending task: %v", name, err)
		}
	}

	recs, err = running.Cancel(t0, "user-a", "")
	final := run(t, running, recs, err)
	if _, err := final.Suspend(t0, "user-a", ""); !errors.Is(err, ErrImmutable) {
		t.Fatalf("suspend a final task: %v", err)
	}
	if _, err := final.Resume(t0, "user-a"); !errors.Is(err, ErrImmutable) {
		t.Fatalf("resume a final task: %v", err)
	}
}

func TestCheckpointOnPreemption(t *testing.T) {
	coop := leased(t, func(in *SpecInput) { in.Checkpoint, in.GracePeriod = new(true), ptr(10) })
	at := t0.Add(5 * time.Second)
	recs, err := coop.Preempt(at, "urgent", "priority")
	p := run(t, coop, recs, err)
	if p.Preemption == nil || p.Preemption.PreemptedBy != "urgent" || !p.Preemption.PreemptedAt.Equal(at) || p.Preemption.Checkpoint != "" {
		t.Fatalf("preemption = %+v", p.Preemption)
	}
	// Until its checkpoint is recorded (or the grace period and slack are
	// over), the preempted task is not requeued.
	if !p.AwaitsCheckpoint(at.Add(9*time.Second), time.Second) || p.AwaitsCheckpoint(at.Add(12*time.Second), time.Second) {
		t.Fatal("AwaitsCheckpoint before and after the grace period")
	}
	if _, err := p.RecordCheckpoint(at, "agent-1", "att-0", "k", 1, ""); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("checkpoint of another attempt: %v", err)
	}
	if _, err := p.RecordCheckpoint(at, "agent-1", "att-1", "", 1, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("checkpoint without a key: %v", err)
	}
	recs, err = p.RecordCheckpoint(at.Add(time.Second), "agent-1", "att-1", "checkpoints/tenant-a/task-1/att-1.tar.gz", 42, "ab")
	c := run(t, p, recs, err)
	if c.Checkpoint == nil || c.Checkpoint.Key != "checkpoints/tenant-a/task-1/att-1.tar.gz" || c.Checkpoint.SizeBytes != 42 ||
		c.Checkpoint.AttemptID != "att-1" || c.Preemption.Checkpoint != c.Checkpoint.Key || p.Preemption.Checkpoint != "" {
		t.Fatalf("checkpointed = %+v %+v (before: %+v)", c.Checkpoint, c.Preemption, p.Preemption)
	}
	if c.AwaitsCheckpoint(at.Add(2*time.Second), time.Second) {
		t.Fatal("still awaits the checkpoint it recorded")
	}
	// Requeued and leased again, the task keeps the checkpoint and the
	// record of its preemption; the next attempt restores it.
	recs, err = c.Requeue(at.Add(3*time.Second), "scheduler", "preemptor finished")
	r := run(t, c, recs, err)
	recs, err = r.Lease(at.Add(4*time.Second), "att-2", "agent-2", "m-2", "req-2")
	r = run(t, r, recs, err)
	if r.Checkpoint == nil || r.Checkpoint.AttemptID != "att-1" || r.Preemption == nil || r.Preemption.PreemptedBy != "urgent" || r.PreemptedBy != "" {
		t.Fatalf("next run = %+v %+v", r.Checkpoint, r.Preemption)
	}
	// A requeued attempt can no longer record one.
	if _, err := r.RecordCheckpoint(at, "agent-1", "att-1", "k", 1, ""); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("late checkpoint: %v", err)
	}

	generic := leased(t, nil)
	recs, err = generic.Preempt(at, "urgent", "priority")
	g := run(t, generic, recs, err)
	if g.AwaitsCheckpoint(at, time.Minute) {
		t.Fatal("a generic task awaits a checkpoint")
	}
	if _, err := g.RecordCheckpoint(at, "agent-1", "att-1", "k", 1, ""); !errors.Is(err, ErrImmutable) {
		t.Fatalf("checkpoint of a generic task: %v", err)
	}
}

func TestArtifactGlobs(t *testing.T) {
	ok, err := NormalizeSpec(SpecInput{Name: "n", Command: "c", Artifacts: []string{"out/*.pt", "metrics.json"}})
	if err != nil || len(ok.Artifacts) != 2 {
		t.Fatalf("valid globs: %+v %v", ok.Artifacts, err)
	}
	for _, bad := range [][]string{{"/etc/passwd"}, {"../up/*"}, {"out/../../x"}, {"out/[a"}, {""}, make([]string, 33)} {
		_, err := NormalizeSpec(SpecInput{Name: "n", Command: "c", Artifacts: bad})
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "artifacts" {
			t.Errorf("artifacts %q: %v", bad, err)
		}
	}
}
