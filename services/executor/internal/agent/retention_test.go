package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
)

// With an injected clock: delivered attempts' journal rows and work
// directories older than the retention go, younger ones and anything a
// running attempt holds stay; past the size cap the oldest go first.
func TestRetentionRemovesExpiredJournalRowsAndLocalFiles(t *testing.T) {
	clk := clocktest.NewFixed(time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second))
	h := newHarness(t, func(c *Config) {
		c.Now = clk.Now
		// The loop's own cleanups must not interfere: once at start, then
		// not for an hour of real time.
		c.Retention = Retention{MaxAge: 7 * 24 * time.Hour, JournalMaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, Interval: time.Hour}
	}).start()
	workdir := func(taskID string) string { return filepath.Join(h.agent.cfg.WorkRoot, safeName(taskID)) }
	// finish runs a task to a delivered end and dates its work dir to now.
	finish := func(name string) string {
		id := h.fake.Add(shell("sh", "-c", "echo "+name+" > out"))[0]
		h.fake.WaitComplete(t, id, 20*time.Second)
		h.waitRow(id, 10*time.Second, "synced", func(r journal.Task) bool { return r.Synced })
		now := clk.Now()
		if err := os.Chtimes(workdir(id), now, now); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(workdir(id), "out"), now, now); err != nil {
			t.Fatal(err)
		}
		return id
	}
	old := finish("old")
	clk.Advance(6 * 24 * time.Hour)
	young := finish("young")
	// A running task whose directory is as old as the oldest.
	running := h.fake.Add(shell("sleep", "30"))[0]
	// Its process started (a PID journaled), so its work directory exists:
	// the journal says running before the directory is made.
	h.waitRow(running, 10*time.Second, "running", func(r journal.Task) bool { return r.Status == journal.StatusRunning && r.PID != 0 })
	past := clk.Now().Add(-20 * 24 * time.Hour)
	if err := os.Chtimes(workdir(running), past, past); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * 24 * time.Hour) // old: 8 days, young: 2 days

	rep, err := h.agent.CleanUp(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.JournalRows != 1 || rep.Dirs != 1 {
		t.Errorf("cleanup = %+v, want the old task's row and directory", rep)
	}
	if _, err := h.agent.journal.Latest(context.Background(), old); err == nil {
		t.Error("the old task's journal row is still there")
	}
	for _, id := range []string{young, running} {
		if _, err := h.agent.journal.Latest(context.Background(), id); err != nil {
			t.Errorf("journal row of %s: %v", id, err)
		}
		if _, err := os.Stat(workdir(id)); err != nil {
			t.Errorf("work dir of %s: %v", id, err)
		}
	}
	if _, err := os.Stat(workdir(old)); !os.IsNotExist(err) {
		t.Errorf("the old work dir: %v, want gone", err)
	}

	// Over the size cap, the young one goes too (oldest first), but never
	// what the running task holds.
	h.agent.cfg.Retention.MaxBytes = 1
	rep, err = h.agent.CleanUp(context.Background())
	if err != nil || rep.Dirs != 1 {
		t.Errorf("cleanup over the cap = %+v, %v", rep, err)
	}
	if _, err := os.Stat(workdir(young)); !os.IsNotExist(err) {
		t.Errorf("the young work dir over the cap: %v, want gone", err)
	}
	if _, err := os.Stat(workdir(running)); err != nil {
		t.Errorf("the running task's work dir: %v", err)
	}
}
