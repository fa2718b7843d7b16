package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAttemptLife is the journal's part of one short task: the
// writes and reads an agent makes from the claim to the synced outcome,
// beside 100 other attempts (a busy agent's journal).
func BenchmarkAttemptLife(b *testing.B) {
	ctx := context.Background()
	j := busyJournal(ctx, b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		attemptLife(ctx, b, j, fmt.Sprintf("t%d", i), fmt.Sprintf("a%d", i))
	}
}

// BenchmarkAttemptLifeParallel is BenchmarkAttemptLife with eight
// attempts at a time, as an agent with eight slots runs them: the writes
// of several attempts then share a commit.
func BenchmarkAttemptLifeParallel(b *testing.B) {
	ctx := context.Background()
	j := busyJournal(ctx, b)
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			attemptLife(ctx, b, j, fmt.Sprintf("t%d", i), fmt.Sprintf("a%d", i))
		}
	})
}

// busyJournal is a journal holding 100 other attempts, closed at the
// benchmark's end.
func busyJournal(ctx context.Context, b *testing.B) *Journal {
	j, err := Open(ctx, filepath.Join(b.TempDir(), "journal.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { j.Close() })
	for i := range 100 {
		if _, err := j.Insert(ctx, row(fmt.Sprintf("bg%d", i), fmt.Sprintf("bga%d", i), t0)); err != nil {
			b.Fatal(err)
		}
	}
	return j
}

// attemptLife makes the journal calls of one short task, in the agent's
// order.
func attemptLife(ctx context.Context, b *testing.B, j *Journal, id, attempt string) {
	if _, err := j.Insert(ctx, row(id, attempt, t0)); err != nil {
		b.Fatal(err)
	}
	if _, err := j.MarkRunning(ctx, attempt, t0); err != nil {
		b.Fatal(err)
	}
	// As the agent does: the run directory before the shim starts,
	// StartTask's answer with its lease, the shim's pids.
	if err := j.SetProcess(ctx, attempt, "/run/"+attempt, "/run/"+attempt+"/shim.sock", 0, 0); err != nil {
		b.Fatal(err)
	}
	if err := j.SetServerStarted(ctx, attempt, t0.Add(time.Minute), t0); err != nil {
		b.Fatal(err)
	}
	if err := j.SetProcess(ctx, attempt, "/run/"+attempt, "/run/"+attempt+"/shim.sock", 100, 101); err != nil {
		b.Fatal(err)
	}
	if _, err := j.Get(ctx, attempt); err != nil {
		b.Fatal(err)
	}
	code := 0
	if _, err := j.Finish(ctx, attempt, Outcome{Status: StatusCompleted, ExitCode: &code, EndedAt: t0.Add(time.Second)}); err != nil {
		b.Fatal(err)
	}
	if _, err := j.Latest(ctx, id); err != nil {
		b.Fatal(err)
	}
	if err := j.MarkSynced(ctx, attempt, "", t0.Add(time.Second)); err != nil {
		b.Fatal(err)
	}
}
