package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

func TestClaimLongPoll(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ClaimWait = 5 * time.Second }).start()
	leasetest.WaitFor(t, 5*time.Second, "first claim", func() bool { return len(h.fake.Calls("ClaimTasks")) > 0 })
	first := h.fake.Calls("ClaimTasks")[0].Req.(*taskv1.ClaimTasksRequest)
	if got := first.GetWait().AsDuration(); got != 5*time.Second {
		t.Errorf("claim wait = %s, want 5s", got)
	}
	if first.GetLimit() != 4 || first.GetAgentId() != "agent-1" || first.GetMachineId() != "machine-1" ||
		len(first.GetLabels()) != 1 || len(first.GetTypes()) != 5 || first.GetRequestId() == "" {
		t.Errorf("claim request = %v", first)
	}
	// (The default types: shell, python, script, noop, and video as ffmpeg
	// is installed here.)
	// Once the claim is parked on the server, a new task is delivered
	// through it at once, not after a polling interval.
	leasetest.WaitFor(t, 5*time.Second, "a parked claim", func() bool { return h.fake.Parked() == 1 })
	added := time.Now()
	id := h.fake.Add(&taskv1.Task{Name: "n", Type: "noop"})[0]
	h.fake.WaitComplete(t, id, 5*time.Second)
	if took := time.Since(added); took > 2*time.Second {
		t.Errorf("task completed %s after it was queued; the long poll did not deliver it", took)
	}
	if n := len(h.fake.Calls("ClaimTasks")); n > 3 {
		t.Errorf("%d claims for one task: the agent polls instead of long-polling", n)
	}
	for _, c := range h.fake.Calls("") {
		if c.Authorization != "Bearer agent-token-123" {
			t.Fatalf("%s sent authorization %q", c.Method, c.Authorization)
		}
	}
}

func TestClaimRequestIDReusedAfterLostAnswer(t *testing.T) {
	h := newHarness(t, nil)
	var lost atomic.Int32
	h.fake.SetLoseClaimAnswer(func(req *taskv1.ClaimTasksRequest) bool {
		return lost.Add(1) == 1
	})
	id := h.fake.Add(shell("echo", "once"))[0]
	h.start()
	done := h.fake.WaitComplete(t, id, 10*time.Second)
	claims := h.fake.Calls("ClaimTasks")
	if len(claims) < 2 {
		t.Fatalf("%d claims, want a retry", len(claims))
	}
	r0 := claims[0].Req.(*taskv1.ClaimTasksRequest).GetRequestId()
	r1 := claims[1].Req.(*taskv1.ClaimTasksRequest).GetRequestId()
	if r0 != r1 {
		t.Errorf("retry used request id %q, first call %q: want the same", r1, r0)
	}
	if len(claims) > 2 {
		if r2 := claims[2].Req.(*taskv1.ClaimTasksRequest).GetRequestId(); r2 == r1 {
			t.Errorf("claim after a successful answer reused request id %q", r2)
		}
	}
	if done.GetExitCode() != 0 || done.GetStdout() != "once\n" {
		t.Errorf("completion = %v", done)
	}
	if n := len(h.fake.Calls("StartTask")); n != 1 {
		t.Errorf("task started %d times, want once", n)
	}
}

func TestNoop(t *testing.T) {
	h := newHarness(t, nil).start()
	ids := h.fake.Add(&taskv1.Task{Name: "a", Type: "noop"}, &taskv1.Task{Name: "b", Type: "noop"})
	for _, id := range ids {
		c := h.fake.WaitComplete(t, id, 5*time.Second)
		if c.GetExitCode() != 0 || c.GetError() != "" || c.GetEndedAt() == nil {
			t.Errorf("noop completion = %v", c)
		}
		row := h.waitRow(id, 5*time.Second, "synced", func(r journal.Task) bool { return r.Synced })
		if row.Status != journal.StatusCompleted || row.RunDir != "" || row.PID != 0 {
			t.Errorf("noop row = %+v, want completed without a process", row)
		}
	}
	if n := len(h.fake.Calls("StartTask")); n != 0 {
		t.Errorf("noop sent %d StartTask calls, want none", n)
	}
}

func TestSlotsBoundProcesses(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 2 }).start()
	var ids []string
	for range 5 {
		ids = append(ids, h.fake.Add(shell("sleep", "0.4"))...)
	}
	peak := 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				peak = max(peak, int(h.agent.running.Load()))
			}
		}
	}()
	for _, id := range ids {
		h.fake.WaitComplete(t, id, 20*time.Second)
	}
	close(stop)
	<-sampled
	if peak > 2 {
		t.Errorf("%d processes ran at once, slots = 2", peak)
	}
	if peak < 2 {
		t.Errorf("at most %d process ran at once, want both slots used", peak)
	}
	for _, c := range h.fake.Calls("ClaimTasks") {
		if l := c.Req.(*taskv1.ClaimTasksRequest).GetLimit(); l > 2 || l < 1 {
			t.Errorf("claim limit %d with 2 slots", l)
		}
	}
}

// A claim's answer naming a task leased to another agent is not run: the
// task would run twice.
func TestClaimedTaskOfAnotherAgentIsNotRun(t *testing.T) {
	h := newHarness(t, nil).start()
	h.agent.startClaimed(context.Background(), []*taskv1.Task{
		{Id: "elsewhere", AttemptId: "att-elsewhere", AssignedAgentId: "agent-2", Type: "shell", Command: "true", Timeout: 60},
	}, 0)
	if row, err := h.agent.journal.Latest(context.Background(), "elsewhere"); err == nil {
		t.Fatalf("journaled %+v: a task leased to agent-2 was taken", row)
	}
	if h.agent.active("att-elsewhere") != nil {
		t.Fatal("a task leased to agent-2 is running here")
	}
}
