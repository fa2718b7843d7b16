package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"google.golang.org/protobuf/proto"
)

// attemptsOf are the journal rows of a task, oldest first.
func (h *harness) attemptsOf(taskID string) []journal.Task {
	h.t.Helper()
	rows, err := h.agent.journal.List(context.Background(), "", 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []journal.Task
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].ID == taskID {
			out = append(out, rows[i])
		}
	}
	return out
}

// A failed local task runs again, retry_delay after each failure, until an
// attempt succeeds or max_retries retries have failed; each retry is a new
// attempt of the same task, counting the ones before it.
func TestLocalTaskRetriesAfterAFailure(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Server = ""; c.Slots = 2 })
	h.start()
	defer h.stop()
	ctx := context.Background()
	counter := filepath.Join(shortDir(t), "runs")
	// Fails twice, then succeeds.
	flaky, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "flaky", Type: "script",
		Command: `n=$(cat "$1" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$1"; echo "run $n"; [ $n -ge 3 ]`,
		Args:    []string{counter}, MaxRetries: proto.Int32(3), RetryDelay: proto.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	if flaky.MaxRetries != 3 || flaky.RetryDelaySec != 1 || flaky.RetryCount != 0 {
		t.Fatalf("accepted task = %+v", flaky)
	}
	broken, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "broken", Command: "false", MaxRetries: proto.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	once, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "once", Command: "false"})
	if err != nil {
		t.Fatal(err)
	}

	last := h.waitRow(flaky.ID, 20*time.Second, "the flaky task's third attempt", func(r journal.Task) bool {
		return r.RetryCount == 2 && journal.Final(r.Status)
	})
	if last.Status != journal.StatusCompleted || last.Stdout != "run 3\n" {
		t.Fatalf("third attempt: %s %q", last.Status, last.Stdout)
	}
	runs := h.attemptsOf(flaky.ID)
	if len(runs) != 3 || runs[0].Status != journal.StatusFailed || runs[1].Status != journal.StatusFailed {
		t.Fatalf("attempts of the flaky task: %+v", runs)
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].AttemptID == runs[i-1].AttemptID || runs[i].RetryCount != i {
			t.Errorf("attempt %d: id %s retry_count %d", i, runs[i].AttemptID, runs[i].RetryCount)
		}
		if gap := runs[i].StartedAt.Sub(runs[i-1].EndedAt); gap < time.Second {
			t.Errorf("attempt %d started %s after the failure, before retry_delay (1s)", i, gap)
		}
	}

	final := h.waitRow(broken.ID, 10*time.Second, "the broken task's retry", func(r journal.Task) bool {
		return r.RetryCount == 1 && journal.Final(r.Status)
	})
	if final.Status != journal.StatusFailed || len(h.attemptsOf(broken.ID)) != 2 {
		t.Errorf("broken task: %s after %d attempts, want failed after 2", final.Status, len(h.attemptsOf(broken.ID)))
	}
	// Without max_retries a local task runs once.
	if r := h.waitFinal(once.ID, 10*time.Second); r.Status != journal.StatusFailed || len(h.attemptsOf(once.ID)) != 1 {
		t.Errorf("task without retries: %s after %d attempts", r.Status, len(h.attemptsOf(once.ID)))
	}
}

// A retry waiting for its delay is kept across a restart and runs after
// it; cancelling a waiting retry ends the task, with no attempt after.
func TestLocalRetryWaitsAcrossRestartAndCancels(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Server = ""; c.Slots = 1 })
	h.start()
	ctx := context.Background()
	marker := filepath.Join(shortDir(t), "ran")
	kept, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "kept", Type: "script",
		Command: `if [ -e "$1" ]; then echo again; exit 0; fi; touch "$1"; exit 1`, Args: []string{marker},
		MaxRetries: proto.Int32(1), RetryDelay: proto.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := h.agent.Submit(ctx, &taskv1.TaskSpec{Name: "cancelled", Command: "false",
		MaxRetries: proto.Int32(5), RetryDelay: proto.Int32(3600)})
	if err != nil {
		t.Fatal(err)
	}
	waiting := h.waitRow(kept.ID, 10*time.Second, "a retry waiting", func(r journal.Task) bool {
		return r.RetryCount == 1 && r.Status == journal.StatusPending
	})
	if waiting.RetryAt.IsZero() || waiting.RetryAt.Before(time.Now()) {
		t.Fatalf("waiting retry has retry_at %v", waiting.RetryAt)
	}
	h.stop()
	h.start()
	defer h.stop()
	if r := h.waitFinal(kept.ID, 15*time.Second); r.Status != journal.StatusCompleted || r.Stdout != "again\n" || r.RetryCount != 1 {
		t.Errorf("retry after the restart: %s %q retry_count %d", r.Status, r.Stdout, r.RetryCount)
	}

	h.waitRow(cancelled.ID, 10*time.Second, "the second task's retry waiting", func(r journal.Task) bool {
		return r.RetryCount == 1 && r.Status == journal.StatusPending
	})
	got, err := h.agent.Cancel(ctx, cancelled.ID, nil)
	if err != nil || got.Status != journal.StatusCancelled {
		t.Fatalf("cancel of a waiting retry: %+v, %v", got, err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(h.attemptsOf(cancelled.ID)); n != 2 {
		t.Errorf("the cancelled task has %d attempts, want 2", n)
	}
}

// Retry settings outside the task API's bounds are refused.
func TestLocalTaskRetryBounds(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Server = "" })
	h.start()
	defer h.stop()
	for _, spec := range []*taskv1.TaskSpec{
		{Name: "n", Command: "true", MaxRetries: proto.Int32(101)},
		{Name: "n", Command: "true", MaxRetries: proto.Int32(-1)},
		{Name: "n", Command: "true", RetryDelay: proto.Int32(86401)},
	} {
		if _, err := h.agent.Submit(context.Background(), spec); err == nil {
			t.Errorf("submit with max_retries %d retry_delay %d was accepted", spec.GetMaxRetries(), spec.GetRetryDelay())
		}
	}
	if c, err := h.agent.journal.Count(context.Background()); err != nil || c.Pending != 0 {
		t.Errorf("journal after the refusals: %+v, %v", c, err)
	}
}
