package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// 16 agents claiming in batches over 5,000 tasks never get the same task,
// and every task is handed out exactly once.
func TestConcurrentAgentsNeverClaimTheSameTask(t *testing.T) {
	// Agents that go quiet are lost after AgentLostAfter and their tasks
	// re-leased (tested elsewhere); here every lease must be the only one.
	e := newEnv(t, func(c *scheduler.Config) { c.Timing.AgentLostAfter = time.Hour })
	ctx := user("tenant-a")
	const n = 5000
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if _, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: fmt.Sprint("t", i), Type: "noop"}}); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	var (
		mu    sync.Mutex
		owner = map[string]string{}
		dups  int
	)
	for a := 0; a < 16; a++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			idle := 0
			for idle < 3 {
				resp, err := e.leases().ClaimTasks(agent(id), &taskv1.ClaimTasksRequest{AgentId: id, MachineId: id, Limit: 25,
					Wait: nil})
				if err != nil {
					t.Error(err)
					return
				}
				if len(resp.GetTasks()) == 0 {
					idle++
					time.Sleep(50 * time.Millisecond)
					continue
				}
				idle = 0
				mu.Lock()
				for _, tk := range resp.GetTasks() {
					if prev, ok := owner[tk.GetId()]; ok {
						dups++
						t.Errorf("task %s claimed by %s and %s", tk.GetId(), prev, id)
					}
					owner[tk.GetId()] = id
				}
				mu.Unlock()
			}
		}(fmt.Sprint("agent-", a))
	}
	wg.Wait()
	if len(owner) != n || dups != 0 {
		t.Fatalf("%d tasks claimed (want %d), %d duplicates", len(owner), n, dups)
	}
	var assigned int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE status = 'assigned'`).Scan(&assigned); err != nil || assigned != n {
		t.Fatalf("assigned rows = %d, %v", assigned, err)
	}
	var leases, tasks int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT aggregate_id) FROM events WHERE event_type = 'TaskLeased'`).Scan(&leases, &tasks); err != nil || leases != n || tasks != n {
		t.Fatalf("TaskLeased events = %d for %d tasks, %v", leases, tasks, err)
	}
}

// The same agent and request id get the same tasks back; a new request id
// gets new ones.
func TestClaimIsIdempotentByRequestID(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	for i := 0; i < 4; i++ {
		e.create(ctx, &taskv1.TaskSpec{Name: fmt.Sprint("t", i), Command: "true"})
	}
	req := &taskv1.ClaimTasksRequest{AgentId: "agent-1", MachineId: "m1", Limit: 2, RequestId: "req-1"}
	first, err := e.leases().ClaimTasks(agent("agent-1"), req)
	if err != nil || len(first.GetTasks()) != 2 || first.GetRequestId() != "req-1" {
		t.Fatalf("first = %v, %v", first, err)
	}
	second, err := e.leases().ClaimTasks(agent("agent-1"), req)
	if err != nil || len(second.GetTasks()) != 2 {
		t.Fatalf("second = %v, %v", second, err)
	}
	for i := range first.GetTasks() {
		if first.GetTasks()[i].GetId() != second.GetTasks()[i].GetId() || first.GetTasks()[i].GetAttemptId() != second.GetTasks()[i].GetAttemptId() {
			t.Fatalf("repeat claim differs: %v vs %v", first.GetTasks()[i], second.GetTasks()[i])
		}
	}
	req.RequestId = ""
	third, err := e.leases().ClaimTasks(agent("agent-1"), req)
	if err != nil || len(third.GetTasks()) != 2 || third.GetRequestId() == "" || third.GetTasks()[0].GetId() == first.GetTasks()[0].GetId() {
		t.Fatalf("third = %v, %v", third, err)
	}
}

// A waiting claim returns as soon as work is submitted, not after a poll.
// The periodic re-check is set far beyond the claim's wait, so only the
// wake-up can answer in time: without it the claim returns at the end of
// its wait.
func TestLongPollWakesOnSubmission(t *testing.T) {
	e := newEnv(t, func(c *scheduler.Config) { c.Timing.ClaimRecheck = time.Hour })
	// An empty claim first: the connection and the claim's statements are
	// ready, so the waiting claim below parks within milliseconds.
	if got := e.claim("agent-1", "m1", 1); len(got) != 0 {
		t.Fatalf("claim on an empty queue = %v", got)
	}
	type answer struct {
		tasks []*taskv1.Task
		err   error
		at    time.Time
	}
	got := make(chan answer, 1)
	go func() {
		tasks, err := e.claimWait("agent-1", "m1", 1, 10*time.Second)
		got <- answer{tasks, err, time.Now()}
	}()
	// Lets the claim park; a claim still looking would find the task
	// without a wake-up, which the limit below cannot tell apart.
	time.Sleep(300 * time.Millisecond)
	submitted := time.Now()
	id := e.create(user("tenant-a"), &taskv1.TaskSpec{Name: "wake", Command: "true"}).GetId()
	a := <-got
	if a.err != nil || len(a.tasks) != 1 || a.tasks[0].GetId() != id {
		t.Fatalf("waiting claim = %v, %v; want task %s", a.tasks, a.err, id)
	}
	if d := a.at.Sub(submitted); d > 900*time.Millisecond {
		t.Fatalf("claim returned %s after submission: not woken by it", d)
	}
}

// Hard targeting: machine ids, labels (never relaxed), IP targets, scatter
// over distinct machines, broadcast to every live machine.
func TestDistribution(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	pinned := e.create(ctx, &taskv1.TaskSpec{Name: "pinned", Command: "true", MachineId: "m2"})
	gpu := e.create(ctx, &taskv1.TaskSpec{Name: "a100", Command: "true", Distribution: &taskv1.Distribution{Labels: []string{"gpu:a100"}}})
	if got := e.claim("agent-1", "m1", 10); len(got) != 0 {
		t.Fatalf("m1 without labels got %v", got)
	}
	if got := e.claim("agent-1", "m1", 10, "gpu:v100"); len(got) != 0 {
		t.Fatalf("v100 machine got a100 work: %v", got)
	}
	if got := e.claim("agent-1", "m1", 10, "gpu:a100", "region:x"); len(got) != 1 || got[0].GetId() != gpu.GetId() {
		t.Fatalf("a100 machine got %v", got)
	}
	if got := e.claim("agent-2", "m2", 10); len(got) != 1 || got[0].GetId() != pinned.GetId() {
		t.Fatalf("m2 got %v", got)
	}

	resp, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "spread", Command: "true",
		Distribution: &taskv1.Distribution{Mode: "scatter", Count: 3}}})
	if err != nil || len(resp.GetTaskIds()) != 3 || resp.GetTask().GetGroupId() == "" {
		t.Fatalf("scatter = %v, %v", resp, err)
	}
	perMachine := map[string]int{}
	for round := 0; round < 3; round++ {
		for _, m := range []string{"s1", "s2", "s3", "s4"} {
			for _, tk := range e.claim("agent-"+m, m, 5) {
				perMachine[m]++
				_ = tk
			}
		}
	}
	total := 0
	for m, n := range perMachine {
		total += n
		if n > 1 {
			t.Fatalf("scatter put %d tasks on %s", n, m)
		}
	}
	if total != 3 {
		t.Fatalf("scatter ran %d tasks", total)
	}

	// Broadcast needs live machines: the claims above registered agents.
	resp, err = e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "everywhere", Command: "uptime",
		Distribution: &taskv1.Distribution{Mode: "broadcast"}}})
	if err != nil || len(resp.GetTaskIds()) < 4 {
		t.Fatalf("broadcast = %v, %v", resp, err)
	}
	resp, err = e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "targets", Command: "true",
		Targets: &taskv1.Targets{MachineIds: []string{"t1", "t2"}, Ips: []string{"10.0.1.1"}}}})
	if err != nil || len(resp.GetTaskIds()) != 3 {
		t.Fatalf("targets = %v, %v", resp, err)
	}
	// The agent helper connects from 10.0.1.1: it gets the IP-targeted task
	// on any machine, but not the machine-targeted ones.
	got := e.claim("agent-ip", "elsewhere", 10)
	if len(got) != 1 || got[0].GetName() != "targets" {
		t.Fatalf("ip-targeted claim = %v", got)
	}
}

// Tasks run after their dependencies complete; a failed dependency cancels
// its dependents.
func TestDependencies(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	first := e.create(ctx, &taskv1.TaskSpec{Name: "download", Command: "true", MaxRetries: i32(0)})
	second := e.create(ctx, &taskv1.TaskSpec{Name: "process", Command: "true", DependsOn: []string{first.GetId()}})
	_, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "bad", Command: "true", DependsOn: []string{"nope"}}})
	if code(err) != "30005" {
		t.Fatalf("unknown dependency: %v", err)
	}
	got := e.claim("agent-1", "m1", 10)
	if len(got) != 1 || got[0].GetId() != first.GetId() {
		t.Fatalf("claimed %v before its dependency finished", got)
	}
	if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: first.GetId(), AgentId: "agent-1",
		AttemptId: got[0].GetAttemptId(), ExitCode: 2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "dependent cancelled", func() bool {
		r, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: second.GetId()})
		return err == nil && r.GetTask().GetStatus() == "cancelled"
	})

	// repeat_count runs copies one after another.
	resp, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "loop", Command: "true", RepeatCount: i32(3)}})
	if err != nil || len(resp.GetTaskIds()) != 3 {
		t.Fatalf("repeat = %v, %v", resp, err)
	}
	for i, id := range resp.GetTaskIds() {
		got := e.claim("agent-1", "m1", 10)
		if len(got) != 1 || got[0].GetId() != id {
			t.Fatalf("repetition %d: claimed %v, want %s", i, got, id)
		}
		if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-1",
			AttemptId: got[0].GetAttemptId()}); err != nil {
			t.Fatal(err)
		}
	}
}

// The inline projection can be rebuilt from the events alone, and a replay
// of task_views equals the live one.
func TestRebuildAndReplay(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	for i := 0; i < 30; i++ {
		e.create(ctx, &taskv1.TaskSpec{Name: fmt.Sprint("t", i), Command: "true", Priority: i32(int32(1 + i%10))})
	}
	for _, tk := range e.claim("agent-1", "m1", 20) {
		if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: tk.GetId(), AgentId: "agent-1",
			AttemptId: tk.GetAttemptId(), ExitCode: int32(len(tk.GetName()) % 2)}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := scheduler.RebuildInlineProjection(context.Background(), e.pool, false)
	if err != nil || rep.Tasks != 30 || len(rep.Differences) != 0 {
		t.Fatalf("compare = %+v, %v", rep, err)
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE tasks SET doc = jsonb_set(doc::jsonb, '{progress}', '7')::json WHERE doc->>'status' = 'completed' AND ctid IN (SELECT ctid FROM tasks WHERE doc->>'status' = 'completed' LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	rep, err = scheduler.RebuildInlineProjection(context.Background(), e.pool, true)
	if err != nil || len(rep.Differences) != 1 {
		t.Fatalf("tampered compare = %+v, %v", rep, err)
	}
	if rep, err = scheduler.RebuildInlineProjection(context.Background(), e.pool, false); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("after rebuild = %+v, %v", rep, err)
	}

	var events int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "projection to catch up", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(version), 0) FROM task_views`).Scan(&n)
		return n == events
	})
	for _, spec := range scheduler.ReplaySpecs(e.broker.Config()) {
		spec.Topic = scheduler.Topic
		r, err := replay(spec, e)
		if err != nil || !r {
			t.Fatalf("replay %s equal=%v err=%v", spec.Name, r, err)
		}
	}
}

// An update keeps the address a targets.ips fan-out gave the task: only an
// agent at that address claims it afterwards, and an update of a
// broadcast's task succeeds and keeps its machine.
func TestUpdateKeepsTheTargetOfAFanOut(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	resp, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "by-ip", Command: "true",
		Targets: &taskv1.Targets{Ips: []string{"10.0.9.9"}}, Artifacts: []string{"out/*.pt"}, Checkpoint: &taskv1.CheckpointSpec{Enabled: true}}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := e.tasks().UpdateTask(ctx, &taskv1.UpdateTaskRequest{Id: resp.GetTask().GetId(), Spec: &taskv1.TaskSpec{Priority: i32(1)}})
	if err != nil || !up.GetTask().GetCheckpoint().GetEnabled() || len(up.GetTask().GetArtifacts()) != 1 {
		t.Fatalf("update = %v, %v", up, err)
	}
	// The agent helper connects from 10.0.1.1, not the target's address.
	if got := e.claim("agent-1", "m1", 10); len(got) != 0 {
		t.Fatalf("an updated IP-targeted task was claimed from another address: %v", got)
	}

	// A claim that leases a task makes its machine live for the broadcast.
	e.create(ctx, &taskv1.TaskSpec{Name: "warm-up", Command: "true"})
	if got := e.claim("agent-2", "m2", 1); len(got) != 1 {
		t.Fatalf("warm-up claim = %v", got)
	}
	bc, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "everywhere", Command: "uptime",
		Distribution: &taskv1.Distribution{Mode: "broadcast"}}})
	if err != nil || len(bc.GetTaskIds()) == 0 {
		t.Fatalf("broadcast = %v, %v", bc, err)
	}
	up, err = e.tasks().UpdateTask(ctx, &taskv1.UpdateTaskRequest{Id: bc.GetTaskIds()[0], Spec: &taskv1.TaskSpec{Name: "renamed"}})
	if err != nil || up.GetTask().GetName() != "renamed" || up.GetTask().GetDistribution().GetMode() != "broadcast" || up.GetTask().GetMachineId() == "" {
		t.Fatalf("update of a broadcast's task = %v, %v", up, err)
	}
}
