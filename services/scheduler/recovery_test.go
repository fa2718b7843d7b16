package scheduler_test

import (
	"context"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

func replay(spec projection.ReplaySpec, e *env) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := projection.Replay(ctx, e.pool, spec)
	if err != nil {
		return false, err
	}
	if !rep.Equal() {
		e.t.Logf("replay %s: %+v", spec.Name, rep.Tables)
	}
	return rep.Equal(), nil
}

// An agent that stops heartbeating loses its leases long before they
// expire (lease_ttl_sec 300); the stale attempt's late completion is then
// rejected, and the new attempt completes.
func TestDeadAgentDetectedByMissedHeartbeats(t *testing.T) {
	e := newEnv(t, func(c *scheduler.Config) { c.Timing.AgentLostAfter = time.Second })
	ctx := user("tenant-a")
	id := e.create(ctx, &taskv1.TaskSpec{Name: "long", Command: "sleep", Args: []string{"600"}, LeaseTtlSec: i32(300)}).GetId()
	old := e.claim("agent-dead", "m1", 1)[0]
	// agent-dead heartbeats, as Taskmesh's agents do: its silence from now
	// on is what makes it lost (an agent that never heartbeats is judged
	// by its leases alone).
	if _, err := e.leases().SendHeartbeat(agent("agent-dead"), &taskv1.SendHeartbeatRequest{AgentId: "agent-dead", MachineId: "m1", AttemptIds: []string{old.GetAttemptId()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.leases().StartTask(agent("agent-dead"), &taskv1.StartTaskRequest{TaskId: id, AgentId: "agent-dead", AttemptId: old.GetAttemptId()}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var fresh *taskv1.Task
	eventually(t, 15*time.Second, "another agent to get the task", func() bool {
		// agent-live heartbeats; agent-dead never does again.
		_, _ = e.leases().SendHeartbeat(agent("agent-live"), &taskv1.SendHeartbeatRequest{AgentId: "agent-live", MachineId: "m2", FreeSlots: 1})
		if got := e.claim("agent-live", "m2", 1); len(got) == 1 {
			fresh = got[0]
		}
		return fresh != nil
	})
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("re-leased after %s", d)
	}
	if fresh.GetId() != id || fresh.GetAttemptId() == old.GetAttemptId() || fresh.GetRetryCount() != 1 {
		t.Fatalf("fresh lease = %v", fresh)
	}
	_, err := e.leases().CompleteTask(agent("agent-dead"), &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-dead", AttemptId: old.GetAttemptId()})
	if code(err) != "30001" {
		t.Fatalf("stale completion: %v", err)
	}
	// The dead agent, if it comes back, is told to stop its attempt.
	hb, err := e.leases().SendHeartbeat(agent("agent-dead"), &taskv1.SendHeartbeatRequest{AgentId: "agent-dead", MachineId: "m1", AttemptIds: []string{old.GetAttemptId()}})
	if err != nil || len(hb.GetStop()) != 1 || hb.GetStop()[0].GetReason() != "lease_lost" {
		t.Fatalf("heartbeat of the returning agent = %v, %v", hb, err)
	}
	if _, err := e.leases().CompleteTask(agent("agent-live"), &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-live", AttemptId: fresh.GetAttemptId()}); err != nil {
		t.Fatal(err)
	}
	var completions int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = 'TaskSucceeded'`, id).Scan(&completions); err != nil || completions != 1 {
		t.Fatalf("succeeded events = %d, %v", completions, err)
	}
}

// Expired leases return to pending; retries honour retry_delay and
// max_retries; the server fails attempts the agent never reports past their
// timeout.
func TestLeaseExpiryRetriesAndTimeouts(t *testing.T) {
	// The clock jumps past AgentLostAfter's default (15 s) before each
	// heartbeat that keeps agent-1 alive; a sweep in between would release
	// its leases as lost instead of expired or timed out.
	e := newEnv(t, func(c *scheduler.Config) { c.Timing.AgentLostAfter = time.Hour })
	ctx := user("tenant-a")
	id := e.create(ctx, &taskv1.TaskSpec{Name: "flaky", Command: "true", LeaseTtlSec: i32(30), RenewIntervalSec: i32(10),
		MaxRetries: i32(1), RetryDelay: i32(120)}).GetId()
	first := e.claim("agent-1", "m1", 1)[0]
	// Started: an attempt that ran uses a retry when its lease expires (one
	// never started would not).
	if _, err := e.leases().StartTask(agent("agent-1"), &taskv1.StartTaskRequest{TaskId: id, AgentId: "agent-1",
		AttemptId: first.GetAttemptId()}); err != nil {
		t.Fatal(err)
	}
	// Keep agent-1 alive so only the lease can expire.
	e.clock.Advance(31 * time.Second)
	_, _ = e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", MachineId: "m1"})
	eventually(t, 5*time.Second, "lease expiry", func() bool {
		r, _ := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: id})
		return r.GetTask().GetStatus() == "pending" && r.GetTask().GetRetryCount() == 1
	})
	second := e.claim("agent-1", "m1", 1)
	if len(second) != 1 || second[0].GetAttemptId() == first.GetAttemptId() {
		t.Fatalf("second attempt = %v", second)
	}
	// Fail it: no retries left (lease expiry used one).
	if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-1",
		AttemptId: second[0].GetAttemptId(), ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	r, _ := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: id})
	if r.GetTask().GetStatus() != "failed" || r.GetTask().GetExitCode() != 3 {
		t.Fatalf("after retries = %v", r.GetTask())
	}
	// retry_delay: a failed attempt with retries left waits before it can
	// be claimed again.
	id2 := e.create(ctx, &taskv1.TaskSpec{Name: "delayed", Command: "true", RetryDelay: i32(120)}).GetId()
	att := e.claim("agent-1", "m1", 1)[0].GetAttemptId()
	if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: id2, AgentId: "agent-1", AttemptId: att, ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	if got := e.claim("agent-1", "m1", 1); len(got) != 0 {
		t.Fatalf("claimed during retry_delay: %v", got)
	}
	e.clock.Advance(121 * time.Second)
	_, _ = e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", MachineId: "m1"})
	if got := e.claim("agent-1", "m1", 1); len(got) != 1 || got[0].GetId() != id2 || got[0].GetRetryCount() != 1 {
		t.Fatalf("after retry_delay: %v", got)
	}
	// Server-side timeout: running past timeout + grace + slack.
	id3 := e.create(ctx, &taskv1.TaskSpec{Name: "hangs", Command: "sleep", Timeout: i32(10), GracePeriodSec: i32(1), MaxRetries: i32(0),
		LeaseTtlSec: i32(3600), RenewIntervalSec: i32(60)}).GetId()
	var att3 string
	for _, tk := range e.claim("agent-1", "m1", 5) {
		if tk.GetId() == id3 {
			att3 = tk.GetAttemptId()
		}
	}
	if _, err := e.leases().StartTask(agent("agent-1"), &taskv1.StartTaskRequest{TaskId: id3, AgentId: "agent-1", AttemptId: att3}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(45 * time.Second)
	_, _ = e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", MachineId: "m1"})
	eventually(t, 5*time.Second, "server-side timeout", func() bool {
		r, _ := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: id3})
		return r.GetTask().GetStatus() == "failed" && r.GetTask().GetError() == "timeout after 10s"
	})
}

// Cancelling a running task tells its agent to stop at the next heartbeat.
func TestCancelReachesTheAgent(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	id := e.create(ctx, &taskv1.TaskSpec{Name: "c", Command: "sleep"}).GetId()
	att := e.claim("agent-1", "m1", 1)[0].GetAttemptId()
	if _, err := e.tasks().CancelTask(ctx, &taskv1.CancelTaskRequest{Id: id, Reason: "changed my mind"}); err != nil {
		t.Fatal(err)
	}
	hb, err := e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", AttemptIds: []string{att}})
	if err != nil || len(hb.GetStop()) != 1 || hb.GetStop()[0].GetReason() != "cancelled" || hb.GetStop()[0].GetTaskId() != id ||
		hb.GetStop()[0].GetGracePeriodSec() != 30 {
		t.Fatalf("heartbeat = %v, %v", hb, err)
	}
	_, err = e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-1", AttemptId: att, ExitCode: 143})
	if code(err) != "30002" {
		t.Fatalf("complete after cancel: %v", err)
	}
}

// An urgent task (priority 1) preempts high-priority work (3), as the
// design's table lists, though the gap is 2; it does not preempt work of
// priority 2.
func TestUrgentTaskPreemptsHighPriorityWork(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	full := func(agentID, machine string, priority int32) (taskID, attemptID string, beat func() *taskv1.SendHeartbeatResponse) {
		taskID = e.create(ctx, &taskv1.TaskSpec{Name: "p" + machine, Command: "sleep", Priority: i32(priority), MachineId: machine}).GetId()
		got := e.claim(agentID, machine, 1)
		if len(got) != 1 || got[0].GetId() != taskID {
			t.Fatalf("%s claimed %v, want %s", machine, got, taskID)
		}
		attemptID = got[0].GetAttemptId()
		beat = func() *taskv1.SendHeartbeatResponse {
			hb, err := e.leases().SendHeartbeat(agent(agentID), &taskv1.SendHeartbeatRequest{AgentId: agentID, MachineId: machine,
				AttemptIds: []string{attemptID}, FreeSlots: 0})
			if err != nil {
				t.Fatal(err)
			}
			return hb
		}
		beat()
		return taskID, attemptID, beat
	}
	_, _, beat2 := full("agent-2", "m2", 2)
	high, _, beat3 := full("agent-3", "m3", 3)
	// The one for m2 waited longer and sorts first among the sweep's
	// candidates: once m3's work is preempted, a sweep has judged it too.
	e.create(ctx, &taskv1.TaskSpec{Name: "urgent-m2", Command: "true", Priority: i32(1), MachineId: "m2"})
	e.create(ctx, &taskv1.TaskSpec{Name: "urgent-m3", Command: "true", Priority: i32(1), MachineId: "m3"})
	eventually(t, 5*time.Second, "the urgent task to preempt m3's priority-3 work", func() bool {
		hb := beat3()
		return len(hb.GetStop()) == 1 && hb.GetStop()[0].GetTaskId() == high && hb.GetStop()[0].GetReason() == "preempted"
	})
	if hb := beat2(); len(hb.GetStop()) != 0 {
		t.Fatalf("priority 1 preempted priority 2: %v", hb)
	}
	r, _ := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: high})
	if r.GetTask().GetStatus() != "preempted" {
		t.Fatalf("priority-3 victim = %v", r.GetTask().GetStatus())
	}
}

// A priority-1 task waiting behind a full machine preempts priority-5 work
// (gap ≥ 3) and a priority-3 one does not; the victim returns to pending
// when the preemptor ends, and then completes.
func TestPreemptionRequeuesTheVictim(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	low := e.create(ctx, &taskv1.TaskSpec{Name: "low", Command: "sleep", Priority: i32(5)}).GetId()
	lowAtt := e.claim("agent-1", "m1", 1)[0].GetAttemptId()
	beat := func(attempts ...string) *taskv1.SendHeartbeatResponse {
		hb, err := e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", MachineId: "m1",
			AttemptIds: attempts, FreeSlots: 0})
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	beat(lowAtt)
	// A positive control on a second full machine: priority-9 work there
	// and a priority-4 task pinned to it, which outranks it by 5.
	filler := e.create(ctx, &taskv1.TaskSpec{Name: "filler", Command: "sleep", Priority: i32(9), MachineId: "m2"}).GetId()
	fill := e.claim("agent-2", "m2", 1)
	if len(fill) != 1 || fill[0].GetId() != filler {
		t.Fatalf("m2 claimed %v, want the filler", fill)
	}
	beat2 := func() *taskv1.SendHeartbeatResponse {
		hb, err := e.leases().SendHeartbeat(agent("agent-2"), &taskv1.SendHeartbeatRequest{AgentId: "agent-2", MachineId: "m2",
			AttemptIds: []string{fill[0].GetAttemptId()}, FreeSlots: 0})
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	beat2()
	// near (priority 3, only m1's priority-5 work to replace: gap 2) and
	// the control are created together; near waited longer and sorts first
	// among the sweep's candidates, so once the control has preempted m2's
	// work, a sweep has judged near too.
	near := e.create(ctx, &taskv1.TaskSpec{Name: "near", Command: "true", Priority: i32(3), MachineId: "m1"}).GetId()
	e.create(ctx, &taskv1.TaskSpec{Name: "control", Command: "true", Priority: i32(4), MachineId: "m2"})
	eventually(t, 5*time.Second, "the control to preempt m2's work", func() bool {
		hb := beat2()
		return len(hb.GetStop()) == 1 && hb.GetStop()[0].GetTaskId() == filler && hb.GetStop()[0].GetReason() == "preempted"
	})
	if hb := beat(lowAtt); len(hb.GetStop()) != 0 {
		t.Fatalf("priority 3 preempted priority 5: %v", hb)
	}
	urgent := e.create(ctx, &taskv1.TaskSpec{Name: "urgent", Command: "true", Priority: i32(1)}).GetId()
	var stop *taskv1.StopAttempt
	eventually(t, 5*time.Second, "preemption", func() bool {
		if hb := beat(lowAtt); len(hb.GetStop()) == 1 {
			stop = hb.GetStop()[0]
		}
		return stop != nil
	})
	if stop.GetReason() != "preempted" || stop.GetTaskId() != low {
		t.Fatalf("stop = %v", stop)
	}
	got := e.claim("agent-1", "m1", 1)
	if len(got) != 1 || got[0].GetId() != urgent {
		t.Fatalf("after preemption claimed %v, want the urgent task", got)
	}
	r, _ := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: low})
	if r.GetTask().GetStatus() != "preempted" {
		t.Fatalf("victim = %v", r.GetTask().GetStatus())
	}
	if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: urgent, AgentId: "agent-1", AttemptId: got[0].GetAttemptId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "victim requeued", func() bool {
		r, _ := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: low})
		return r.GetTask().GetStatus() == "pending"
	})
	// Priority order: near (3) then low (5).
	for _, want := range []string{near, low} {
		got := e.claim("agent-1", "m1", 1)
		if len(got) != 1 || got[0].GetId() != want {
			t.Fatalf("claimed %v, want %s", got, want)
		}
		if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: want, AgentId: "agent-1", AttemptId: got[0].GetAttemptId()}); err != nil {
			t.Fatal(err)
		}
	}
	r, _ = e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: low})
	if r.GetTask().GetStatus() != "completed" || r.GetTask().GetAttemptId() == lowAtt {
		t.Fatalf("victim at the end = %v", r.GetTask())
	}
}
