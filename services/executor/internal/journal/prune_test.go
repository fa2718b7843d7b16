package journal

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Prune removes delivered rows synced before the cutoff and nothing the
// agent still runs or owes; Held names what must stay.
func TestPruneKeepsWhatIsOwedOrYoung(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	r := row("t", "x", t0)
	r.Resources = map[string]string{"memory": "64Mi"}
	if _, err := j.Insert(ctx, row("t1", "old", t0), row("t2", "young", t0), row("t3", "owed", t0), row("t4", "running", t0), r); err != nil {
		t.Fatal(err)
	}
	for a, end := range map[string]time.Time{"old": t0, "young": t0.Add(6 * 24 * time.Hour), "owed": t0} {
		if _, err := j.Finish(ctx, a, Outcome{Status: StatusCompleted, EndedAt: end}); err != nil {
			t.Fatal(err)
		}
	}
	// What an attempt keeps goes with its row, and only with it: "young"
	// is kept, and "claiming" has files journaled and no row yet (claim
	// order).
	for _, a := range []string{"old", "young", "claiming"} {
		if err := j.SetAttemptFiles(ctx, a, AttemptFiles{Checkpoint: true, Artifacts: []string{"out/*"}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = j.MarkSynced(ctx, "old", "", t0.Add(time.Minute))
	_ = j.MarkSynced(ctx, "young", "", t0.Add(6*24*time.Hour))
	n, err := j.Prune(ctx, t0.Add(7*24*time.Hour).Add(-24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want the old row", n, err)
	}
	if _, err := j.Get(ctx, "old"); err == nil {
		t.Error("the old delivered row survived")
	}
	for a, kept := range map[string]bool{"old": false, "young": true, "claiming": true} {
		f, err := j.AttemptFiles(ctx, a)
		if err != nil || f.Checkpoint != kept {
			t.Errorf("files of %s after the prune: %+v, %v; want kept %v", a, f, err, kept)
		}
	}
	attempts, tasks, err := j.Held(ctx)
	if err != nil || !attempts["owed"] || !attempts["running"] || attempts["young"] || !tasks["t3"] || !tasks["t4"] {
		t.Errorf("Held = %v %v, %v", attempts, tasks, err)
	}
	if got, err := j.Get(ctx, "x"); err != nil || got.Resources["memory"] != "64Mi" {
		t.Errorf("resources round trip = %v, %v", got.Resources, err)
	}
}

func TestJournalFileIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("journal file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}
