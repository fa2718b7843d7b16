package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/proto"
)

func TestRenewLosesAttempt(t *testing.T) {
	tests := []struct {
		name       string
		code       int
		wantStatus string
		wantErr    string
	}{
		{name: "lease expired", code: rpcerr.LeaseExpired, wantStatus: journal.StatusFailed, wantErr: "lease lost: 30003"},
		{name: "attempt mismatch", code: rpcerr.AttemptMismatch, wantStatus: journal.StatusFailed, wantErr: "lease lost: 30001"},
		{name: "task final", code: rpcerr.TaskImmutable, wantStatus: journal.StatusCancelled, wantErr: "task is final on the server: 30002"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.RenewInterval = 300 * time.Millisecond; c.GracePeriod = time.Second })
			h.fake.SetFail(func(method string, _ proto.Message) error {
				if method == "RenewTaskLease" {
					return rpcerr.New(tc.code, "refused")
				}
				return nil
			})
			id := h.fake.Add(shell("sleep", "30"))[0]
			h.start()
			begin := time.Now()
			// Synced is the end of the attempt's story: an outcome that is
			// reported is marked synced only after its CompleteTask, and a
			// synced outcome is never sent again. So once the final row is
			// synced, a CompleteTask for it would already be recorded.
			row := h.waitRow(id, 10*time.Second, "final and synced", func(r journal.Task) bool { return journal.Final(r.Status) && r.Synced })
			if time.Since(begin) > 5*time.Second {
				t.Errorf("stopping took %s", time.Since(begin))
			}
			if row.Status != tc.wantStatus || !strings.HasPrefix(row.Error, tc.wantErr) {
				t.Errorf("row status %s error %q, want %s %q", row.Status, row.Error, tc.wantStatus, tc.wantErr)
			}
			if !groupGone(row.PID) {
				t.Error("process survived the lost lease")
			}
			if n := len(h.fake.Calls("CompleteTask")); n != 0 {
				t.Errorf("%d CompleteTask calls for a lost attempt", n)
			}
		})
	}
}

func TestRenewKeepsLeaseAlive(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RenewInterval = time.Hour })
	// A 3 s lease: the agent must renew before a third of it is left,
	// whatever its renew interval says.
	h.fake.SetLeaseTTL(3 * time.Second)
	id := h.fake.Add(shell("sleep", "4"))[0]
	h.start()
	c := h.fake.WaitComplete(t, id, 15*time.Second)
	if c.GetExitCode() != 0 {
		t.Fatalf("completion %v", c)
	}
	if n := len(h.fake.Calls("RenewTaskLease")); n < 2 {
		t.Errorf("%d renewals during a 4 s task with a 3 s lease", n)
	}
}

// One delivery at a time, the backlog goes in the order the attempts ended
// (with more at once, they are started in that order).
func TestServerUnreachableOutcomesSyncLater(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SyncParallel = 1 })
	dir := shortDir(t)
	// Three tasks, each waiting for its file; the test releases them one
	// at a time, so they end in a known order: 0, 2, 1.
	var ids []string
	for i := range 3 {
		marker := filepath.Join(dir, "go"+string(rune('0'+i)))
		ids = append(ids, h.fake.Add(script(`while [ ! -e "$1" ]; do sleep 0.05; done; echo done`, marker))[0])
	}
	h.start()
	for _, id := range ids {
		h.waitRow(id, 10*time.Second, "process of "+id, func(r journal.Task) bool { return r.PID != 0 })
	}
	h.fake.Stop()
	wantOrder := []string{ids[0], ids[2], ids[1]}
	var rows []journal.Task
	for _, i := range []int{0, 2, 1} {
		if err := os.WriteFile(filepath.Join(dir, "go"+string(rune('0'+i))), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		row := h.waitFinal(ids[i], 10*time.Second)
		if row.Synced || row.Status != journal.StatusCompleted {
			t.Fatalf("row while offline: status %s synced %v", row.Status, row.Synced)
		}
		rows = append(rows, row)
	}
	for i := 1; i < len(rows); i++ {
		if !rows[i].EndedAt.After(rows[i-1].EndedAt) {
			t.Fatalf("journal end times %v then %v: not the order the tasks ended in", rows[i-1].EndedAt, rows[i].EndedAt)
		}
	}
	leasetest.WaitFor(t, 5*time.Second, "agent notices the outage", func() bool {
		st, _ := h.agent.Status(t.Context())
		return !st.ServerReachable && st.Unsynced == 3
	})
	before := len(h.fake.Calls("CompleteTask"))
	h.fake.Restart(t)
	for _, id := range ids {
		if c := h.fake.WaitComplete(t, id, 20*time.Second); c.GetStdout() != "done\n" {
			t.Errorf("late completion %v", c)
		}
	}
	var order []string
	for _, c := range h.fake.Calls("CompleteTask")[before:] {
		id := c.Req.(*taskv1.CompleteTaskRequest).GetTaskId()
		if !slices.Contains(order, id) {
			order = append(order, id)
		}
	}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("delivered %v, want end-time order %v", order, wantOrder)
	}
	for _, id := range ids {
		h.waitRow(id, 5*time.Second, "synced", func(r journal.Task) bool { return r.Synced })
	}
}

// A backlog of outcomes drains several at a time: one at a time, a busy
// server's answer time bounded the agent's rate below what its slots
// finished, and the backlog never cleared. Each CompleteTask here is held
// until four are in flight together; delivered one by one, each waits out
// the hold and the test fails.
func TestOutcomeBacklogDrainsSeveralAtOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 8 })
	dir := shortDir(t)
	marker := filepath.Join(dir, "go")
	var ids []string
	for range 6 {
		ids = append(ids, h.fake.Add(script(`while [ ! -e "$1" ]; do sleep 0.05; done`, marker))[0])
	}
	h.start()
	for _, id := range ids {
		h.waitRow(id, 10*time.Second, "process of "+id, func(r journal.Task) bool { return r.PID != 0 })
	}
	h.fake.Stop()
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, 10*time.Second, "six outcomes waiting", func() bool {
		st, _ := h.agent.Status(t.Context())
		return !st.ServerReachable && st.Unsynced == 6
	})

	const together = 4
	var (
		mu             sync.Mutex
		inFlight, most int
		released       bool
		release        = make(chan struct{})
	)
	h.fake.SetFail(func(method string, _ proto.Message) error {
		if method != "CompleteTask" {
			return nil
		}
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == together && !released {
			released = true
			close(release)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	h.fake.Restart(t)
	for _, id := range ids {
		if c := h.fake.WaitComplete(t, id, 30*time.Second); c.GetExitCode() != 0 {
			t.Errorf("late completion %v", c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most < together {
		t.Fatalf("at most %d outcomes were delivered at once, want %d", most, together)
	}
}
