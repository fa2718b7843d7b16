package journal

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

func open(t *testing.T) *Journal {
	t.Helper()
	j, err := Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

var t0 = time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)

func row(id, attempt string, at time.Time) Task {
	return Task{
		ID: id, AttemptID: attempt, Name: "n", Type: "shell", Origin: OriginServer, Command: "echo",
		Args: []string{"a b", "c"}, Env: map[string]string{"K": "v"}, Timeout: 60, Priority: 5,
		Status: StatusAssigned, LeaseExpiresAt: at.Add(5 * time.Minute), ReceivedAt: at, AssignedAt: at,
	}
}

func TestInsertIsIdempotentAndRoundTrips(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	created, err := j.Insert(ctx, row("t1", "a1", t0), row("t2", "a2", t0))
	if err != nil || !created[0] || !created[1] {
		t.Fatalf("Insert = %v, %v", created, err)
	}
	created, err = j.Insert(ctx, row("t1", "a1", t0.Add(time.Hour)))
	if err != nil || created[0] {
		t.Fatalf("replayed Insert = %v, %v; want not created", created, err)
	}
	got, err := j.Get(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	want := row("t1", "a1", t0)
	if got.ID != want.ID || got.Args[0] != "a b" || got.Env["K"] != "v" || !got.ReceivedAt.Equal(t0) ||
		!got.LeaseExpiresAt.Equal(want.LeaseExpiresAt) || got.Status != StatusAssigned || got.ExitCode != nil || got.Synced {
		t.Errorf("round trip = %+v", got)
	}
	if _, err := j.Get(ctx, "missing"); err != ErrNotFound {
		t.Errorf("Get missing = %v", err)
	}
}

func TestFinishOnce(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	j.Insert(ctx, row("t1", "a1", t0))
	code := 3
	changed, err := j.Finish(ctx, "a1", Outcome{Status: StatusFailed, ExitCode: &code, EndedAt: t0.Add(time.Second), Error: "x"})
	if err != nil || !changed {
		t.Fatalf("Finish = %v, %v", changed, err)
	}
	changed, err = j.Finish(ctx, "a1", Outcome{Status: StatusCompleted, EndedAt: t0.Add(2 * time.Second)})
	if err != nil || changed {
		t.Fatalf("second Finish = %v, %v; want no change", changed, err)
	}
	got, _ := j.Get(ctx, "a1")
	if got.Status != StatusFailed || *got.ExitCode != 3 || got.Error != "x" {
		t.Errorf("row = %+v", got)
	}
}

func TestUnsyncedInEndOrder(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	ends := map[string]time.Duration{"a1": 3 * time.Second, "a2": time.Second, "a3": 2 * time.Second, "a4": 0}
	for _, a := range []string{"a1", "a2", "a3", "a4"} {
		j.Insert(ctx, row("t"+a, a, t0))
	}
	for _, a := range []string{"a1", "a2", "a3"} {
		// Nanosecond differences must sort too: times are fixed-width text.
		j.Finish(ctx, a, Outcome{Status: StatusCompleted, EndedAt: t0.Add(ends[a] + time.Nanosecond)})
	}
	j.Finish(ctx, "a4", Outcome{Status: StatusCancelled, EndedAt: t0, Synced: true, Note: "server decided"})
	rows, err := j.Unsynced(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.AttemptID)
	}
	if len(got) != 3 || got[0] != "a2" || got[1] != "a3" || got[2] != "a1" {
		t.Fatalf("Unsynced = %v, want [a2 a3 a1]", got)
	}
	j.MarkSynced(ctx, "a2", "", t0)
	j.RecordSyncFailure(ctx, "a3", "unavailable")
	c, _ := j.Count(ctx)
	if c.Unsynced != 2 {
		t.Errorf("Count = %+v", c)
	}
	r3, _ := j.Get(ctx, "a3")
	if r3.SyncAttempts != 1 || r3.LastSyncError != "unavailable" {
		t.Errorf("a3 = %+v", r3)
	}
}

func TestLatestAndList(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	j.Insert(ctx, row("t1", "a1", t0), row("t2", "b1", t0.Add(time.Second)))
	// The same task leased again to this agent: a new attempt, a new row.
	j.Insert(ctx, row("t1", "a2", t0.Add(2*time.Second)))
	latest, err := j.Latest(ctx, "t1")
	if err != nil || latest.AttemptID != "a2" {
		t.Fatalf("Latest = %v, %v", latest.AttemptID, err)
	}
	list, _ := j.List(ctx, "", 0)
	if len(list) != 3 || list[0].AttemptID != "a2" || list[2].AttemptID != "a1" {
		t.Errorf("List order wrong: %v", list)
	}
	j.MarkRunning(ctx, "b1", t0)
	running, _ := j.List(ctx, StatusRunning, 10)
	if len(running) != 1 || running[0].AttemptID != "b1" {
		t.Errorf("List running = %v", running)
	}
	active, _ := j.WithStatus(ctx, StatusAssigned, StatusRunning)
	if len(active) != 3 {
		t.Errorf("WithStatus = %d rows", len(active))
	}
}

func TestVideoParamsRoundTrip(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	r := row("v1", "va1", t0)
	r.Type, r.Command, r.Video = "video", "", `{"model":"wan2.2-t2v","prompt":"一只猫"}`
	if _, err := j.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := j.Get(ctx, "va1")
	if err != nil || got.Video != r.Video || got.Type != "video" {
		t.Fatalf("Get = %+v, %v; want video %q", got, err, r.Video)
	}
}

// A journal written before the video column existed opens, keeps its rows
// and gains the column.
func TestOpenUpgradesAnOlderJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	old := schema
	for _, col := range []string{"    video                  TEXT NOT NULL DEFAULT '',\n",
		"    max_retries            INTEGER NOT NULL DEFAULT 0,\n", "    retry_delay            INTEGER NOT NULL DEFAULT 0,\n",
		"    retry_count            INTEGER NOT NULL DEFAULT 0,\n", "    retry_at               TEXT,\n"} {
		without := strings.Replace(old, col, "", 1)
		if without == old {
			t.Fatalf("schema has no column %q to remove", col)
		}
		old = without
	}
	if _, err := db.ExecContext(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO local_tasks (id, attempt_id, command, status) VALUES ('t1', 'a1', 'echo', 'completed')`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	j, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open an older journal: %v", err)
	}
	defer j.Close()
	got, err := j.Get(ctx, "a1")
	if err != nil || got.Status != StatusCompleted || got.Video != "" {
		t.Fatalf("old row = %+v, %v", got, err)
	}
	r := row("v1", "va1", t0)
	r.Video = `{"model":"m"}`
	r.MaxRetries, r.RetryDelaySec, r.RetryCount, r.RetryAt = 3, 60, 1, t0.Add(time.Minute)
	if _, err := j.Insert(ctx, r); err != nil {
		t.Fatalf("insert after upgrade: %v", err)
	}
	if got, err := j.Get(ctx, "va1"); err != nil || got.MaxRetries != 3 || got.RetryDelaySec != 60 || got.RetryCount != 1 ||
		!got.RetryAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("retries after the upgrade = %+v, %v", got, err)
	}
}

// An attempt ends where its task does, and also when it is preempted.
func TestFinal(t *testing.T) {
	for status, want := range map[string]bool{StatusPending: false, StatusAssigned: false, StatusRunning: false,
		StatusCompleted: true, StatusFailed: true, StatusCancelled: true, StatusPreempted: true, "suspended": false} {
		if got := Final(status); got != want {
			t.Errorf("Final(%q) = %v, want %v", status, got, want)
		}
	}
}

func TestAttemptFilesSurviveAReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := j.SetAttemptFiles(ctx, "att-1", AttemptFiles{Checkpoint: true, Artifacts: []string{"out/*.pt"}}); err != nil {
		t.Fatal(err)
	}
	if err := j.SetAttemptFiles(ctx, "att-2", AttemptFiles{}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if j, err = Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	f, err := j.AttemptFiles(ctx, "att-1")
	if err != nil || !f.Checkpoint || len(f.Artifacts) != 1 || f.Artifacts[0] != "out/*.pt" {
		t.Fatalf("att-1 = %+v, %v", f, err)
	}
	if f, err := j.AttemptFiles(ctx, "att-2"); err != nil || !f.Zero() {
		t.Fatalf("att-2 = %+v, %v", f, err)
	}
}

// A read neither waits for the writing connection nor sees what it has
// not committed; once committed, the next read sees it.
func TestReadsDoNotWaitForTheWriter(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	if _, err := j.Insert(ctx, row("t1", "a1", t0)); err != nil {
		t.Fatal(err)
	}
	conn, err := j.db.Conn(ctx) // the one writing connection, held
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `UPDATE local_tasks SET status = ? WHERE attempt_id = 'a1'`, StatusRunning); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := j.Get(rctx, "a1")
	if err != nil {
		t.Fatalf("Get while the writer holds its transaction: %v", err)
	}
	if got.Status != StatusAssigned {
		t.Errorf("read saw an uncommitted status %q", got.Status)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	if got, err = j.Latest(ctx, "t1"); err != nil || got.Status != StatusRunning {
		t.Errorf("after the commit Latest = %q, %v; want %q", got.Status, err, StatusRunning)
	}
}

// StartTask's answer is journaled in one write: the acknowledgement with
// the lease it gave, or the acknowledgement alone when it gave none.
func TestSetServerStartedWithItsLease(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	if _, err := j.Insert(ctx, row("t1", "a1", t0), row("t2", "a2", t0)); err != nil {
		t.Fatal(err)
	}
	expires, now := t0.Add(10*time.Minute), t0.Add(time.Second)
	if err := j.SetServerStarted(ctx, "a1", expires, now); err != nil {
		t.Fatal(err)
	}
	if err := j.SetServerStarted(ctx, "a2", time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	got, _ := j.Get(ctx, "a1")
	if !got.ServerStarted || !got.LeaseExpiresAt.Equal(expires) || !got.LastHeartbeatAt.Equal(now) {
		t.Errorf("with a lease: server started %v, lease %v, heartbeat %v", got.ServerStarted, got.LeaseExpiresAt, got.LastHeartbeatAt)
	}
	got, _ = j.Get(ctx, "a2")
	if !got.ServerStarted || !got.LeaseExpiresAt.Equal(t0.Add(5*time.Minute)) || !got.LastHeartbeatAt.IsZero() {
		t.Errorf("without a lease: server started %v, lease %v, heartbeat %v; want the claim's lease kept",
			got.ServerStarted, got.LeaseExpiresAt, got.LastHeartbeatAt)
	}
}

// Writes that waited for another share one transaction: each gets its
// own result, a statement that fails is undone alone with its error, and
// the others of the group are committed.
func TestWritesThatWaitedShareACommit(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	const n = 6
	for i := range n {
		if _, err := j.Insert(ctx, row(fmt.Sprintf("t%d", i), fmt.Sprintf("a%d", i), t0)); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the writing side as a running group does, so that the writes
	// below queue up and run together.
	j.mu.Lock()
	j.busy = true
	j.mu.Unlock()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attempt := fmt.Sprintf("a%d", i)
			if i == 3 {
				// run_dir is NOT NULL: this one fails.
				_, errs[i] = j.execStmt(ctx, `UPDATE local_tasks SET run_dir = NULL WHERE attempt_id = ?`, attempt)
				return
			}
			errs[i] = j.SetProcess(ctx, attempt, "/run/"+attempt, "/run/"+attempt+"/sock", 10+i, 20+i)
		}()
	}
	leasetest.WaitFor(t, 10*time.Second, "the writes queued", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return len(j.queue) == n
	})
	// Let the first waiting write lead the group, as a finished group
	// does.
	j.mu.Lock()
	next := j.queue[0]
	j.queue = j.queue[1:]
	next.lead = true
	close(next.done)
	j.mu.Unlock()
	wg.Wait()

	for i := range n {
		got, err := j.Get(ctx, fmt.Sprintf("a%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "NOT NULL") {
				t.Errorf("the failing write: err %v", errs[i])
			}
			if got.RunDir != "" {
				t.Errorf("the failing write changed its row: %q", got.RunDir)
			}
			continue
		}
		if errs[i] != nil || got.RunDir != fmt.Sprintf("/run/a%d", i) || got.ShimPID != 10+i || got.PID != 20+i {
			t.Errorf("write %d: err %v, row run_dir %q pids %d %d", i, errs[i], got.RunDir, got.ShimPID, got.PID)
		}
	}
	j.mu.Lock()
	busy, queued := j.busy, len(j.queue)
	j.mu.Unlock()
	if busy || queued != 0 {
		t.Errorf("after the group: busy %v, %d queued", busy, queued)
	}
}

// Many attempts written at once all reach their final rows.
func TestConcurrentAttemptsAreAllJournaled(t *testing.T) {
	ctx := context.Background()
	j := open(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				id, attempt := fmt.Sprintf("t%d-%d", g, i), fmt.Sprintf("a%d-%d", g, i)
				if _, err := j.Insert(ctx, row(id, attempt, t0)); err != nil {
					t.Error(err)
					return
				}
				if ok, err := j.MarkRunning(ctx, attempt, t0); err != nil || !ok {
					t.Errorf("mark running %s: %v %v", attempt, ok, err)
					return
				}
				code := 0
				if ok, err := j.Finish(ctx, attempt, Outcome{Status: StatusCompleted, ExitCode: &code, EndedAt: t0}); err != nil || !ok {
					t.Errorf("finish %s: %v %v", attempt, ok, err)
					return
				}
				if err := j.MarkSynced(ctx, attempt, "", t0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	c, err := j.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done, err := j.WithStatus(ctx, StatusCompleted)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 200 {
		t.Errorf("%d completed attempts, want 200 (counts %+v)", len(done), c)
	}
	for _, r := range done {
		if !r.Synced {
			t.Errorf("%s not synced", r.AttemptID)
		}
	}
}
