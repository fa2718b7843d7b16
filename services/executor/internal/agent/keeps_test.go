package agent

import (
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
)

// What claimed attempts keep is held in memory only until their outcome
// is settled: an agent that runs many tasks does not grow with them.
func TestSettledAttemptsLeaveNothingInMemory(t *testing.T) {
	h := newHarness(t, nil).start()
	ids := h.fake.Add(shell("true"), shell("false"), shell("true"))
	for _, id := range ids {
		h.waitRow(id, 10*time.Second, "final and synced", func(r journal.Task) bool { return journal.Final(r.Status) && r.Synced })
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.agent.mu.Lock()
		n := len(h.agent.keeps)
		h.agent.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts still kept in memory after their outcomes were delivered", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
