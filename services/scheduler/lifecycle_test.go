package scheduler_test

import (
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func TestTaskLifecycleAndReadYourWrites(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	created := e.create(ctx, &taskv1.TaskSpec{Name: "train", Type: "python", Command: "python", Args: []string{"train.py"},
		Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, Priority: i32(3)})
	if created.GetStatus() != "pending" || created.GetPriority() != 3 || created.GetMaxRetries() != 3 || created.GetTimeout() != 3600 {
		t.Fatalf("created = %v", created)
	}
	got, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: created.GetId()})
	if err != nil || got.GetTask().GetVersion() != 1 {
		t.Fatalf("get right after create = %v, %v", got, err)
	}

	claimed := e.claim("agent-1", "machine-1", 10)
	if len(claimed) != 1 || claimed[0].GetId() != created.GetId() || claimed[0].GetStatus() != "assigned" ||
		claimed[0].GetAttemptId() == "" || claimed[0].GetAssignedAgentId() != "agent-1" || claimed[0].GetLeaseExpiresAt() == nil {
		t.Fatalf("claimed = %v", claimed)
	}
	att := claimed[0].GetAttemptId()
	id := created.GetId()
	l := e.leases()
	a := agent("agent-1")
	st, err := l.StartTask(a, &taskv1.StartTaskRequest{TaskId: id, AgentId: "agent-1", AttemptId: att})
	if err != nil || st.GetStatus() != "running" || st.GetStartedAt() == nil {
		t.Fatalf("start = %v, %v", st, err)
	}
	if _, err := l.StartTask(a, &taskv1.StartTaskRequest{TaskId: id, AgentId: "agent-1", AttemptId: att}); err != nil {
		t.Fatalf("repeated start: %v", err)
	}
	pr, err := l.ReportTaskProgress(a, &taskv1.ReportTaskProgressRequest{TaskId: id, AgentId: "agent-1", AttemptId: att, Progress: 50, Message: "half"})
	if err != nil || pr.GetProgress() != 50 {
		t.Fatalf("progress = %v, %v", pr, err)
	}
	rn, err := l.RenewTaskLease(a, &taskv1.RenewTaskLeaseRequest{TaskId: id, AgentId: "agent-1", AttemptId: att, ExtendSec: 600})
	if err != nil || rn.GetLeaseExpiresAt().AsTime().Before(time.Now().Add(590*time.Second)) {
		t.Fatalf("renew = %v, %v", rn, err)
	}
	done, err := l.CompleteTask(a, &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-1", AttemptId: att, ExitCode: 0, Stdout: "loss=0.1\n"})
	if err != nil || done.GetStatus() != "completed" || done.GetEndedAt() == nil {
		t.Fatalf("complete = %v, %v", done, err)
	}
	again, err := l.CompleteTask(a, &taskv1.CompleteTaskRequest{TaskId: id, AgentId: "agent-1", AttemptId: att, ExitCode: 0})
	if err != nil || again.GetStatus() != "completed" {
		t.Fatalf("repeated complete = %v, %v", again, err)
	}
	got, err = e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: id})
	if err != nil || got.GetTask().GetStatus() != "completed" || got.GetTask().GetExitCode() != 0 || got.GetTask().GetStdout() != "loss=0.1\n" {
		t.Fatalf("get after complete = %v, %v", got, err)
	}
	res, err := e.tasks().GetTaskResult(ctx, &taskv1.GetTaskResultRequest{Id: id})
	if err != nil || res.GetResult().GetStorageType() != "db" || res.GetResult().GetStdout() != "loss=0.1\n" {
		t.Fatalf("result = %v, %v", res, err)
	}
	// Lists read the Kafka-fed projection: eventually consistent.
	eventually(t, 10*time.Second, "task_views to show the completed task", func() bool {
		list, err := e.tasks().ListTasks(ctx, &taskv1.ListTasksRequest{Status: "completed"})
		return err == nil && len(list.GetTasks()) == 1 && list.GetTasks()[0].GetVersion() == got.GetTask().GetVersion()
	})
}

func TestEveryBusinessCodeFromRealRequests(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	id := e.create(ctx, &taskv1.TaskSpec{Name: "x", Command: "true", LeaseTtlSec: i32(5), RenewIntervalSec: i32(1)}).GetId()
	att := e.claim("agent-1", "m1", 1)[0].GetAttemptId()
	l, a := e.leases(), agent("agent-1")

	_, err := l.StartTask(a, &taskv1.StartTaskRequest{TaskId: id, AgentId: "agent-1", AttemptId: "someone-else"})
	if code(err) != "30001" {
		t.Errorf("other attempt: %v", err)
	}
	_, err = e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: "no-such-task"})
	if code(err) != "30004" {
		t.Errorf("unknown task: %v", err)
	}
	_, err = e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "bad", Command: "x", Priority: i32(11)}})
	if code(err) != "30005" {
		t.Errorf("priority 11: %v", err)
	}
	_, err = e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "bad"}})
	if code(err) != "30005" {
		t.Errorf("missing command: %v", err)
	}
	// Lease expired: move time past the 5 s lease. Before and after the
	// sweeper requeues the task the renewal is 30003.
	e.clock.Advance(10 * time.Second)
	_, err = l.RenewTaskLease(a, &taskv1.RenewTaskLeaseRequest{TaskId: id, AgentId: "agent-1", AttemptId: att})
	if c := code(err); c != "30003" {
		t.Errorf("renew after expiry: %v", err)
	}
	// A completed task cannot be changed: 30002.
	id2 := e.create(ctx, &taskv1.TaskSpec{Name: "y", Command: "true"}).GetId()
	var att2 string
	eventually(t, 5*time.Second, "claim of the second task", func() bool {
		for _, tk := range e.claim("agent-2", "m2", 5) {
			if tk.GetId() == id2 {
				att2 = tk.GetAttemptId()
			}
		}
		return att2 != ""
	})
	if _, err := l.CompleteTask(agent("agent-2"), &taskv1.CompleteTaskRequest{TaskId: id2, AgentId: "agent-2", AttemptId: att2}); err != nil {
		t.Fatal(err)
	}
	_, err = e.tasks().UpdateTask(ctx, &taskv1.UpdateTaskRequest{Id: id2, Spec: &taskv1.TaskSpec{Name: "z"}})
	if code(err) != "30002" {
		t.Errorf("update completed: %v", err)
	}
	_, err = l.RenewTaskLease(agent("agent-2"), &taskv1.RenewTaskLeaseRequest{TaskId: id2, AgentId: "agent-2", AttemptId: att2})
	if code(err) != "30002" {
		t.Errorf("renew completed: %v", err)
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	e := newEnv(t)
	a, b := user("tenant-a"), user("tenant-b")
	id := e.create(a, &taskv1.TaskSpec{Name: "secret", Command: "true"}).GetId()
	for name, call := range map[string]func() error{
		"get":    func() error { _, err := e.tasks().GetTask(b, &taskv1.GetTaskRequest{Id: id}); return err },
		"cancel": func() error { _, err := e.tasks().CancelTask(b, &taskv1.CancelTaskRequest{Id: id}); return err },
		"delete": func() error { _, err := e.tasks().DeleteTask(b, &taskv1.DeleteTaskRequest{Id: id}); return err },
		"update": func() error {
			_, err := e.tasks().UpdateTask(b, &taskv1.UpdateTaskRequest{Id: id, Spec: &taskv1.TaskSpec{Name: "mine"}})
			return err
		},
		"result": func() error { _, err := e.tasks().GetTaskResult(b, &taskv1.GetTaskResultRequest{Id: id}); return err },
		"retry":  func() error { _, err := e.tasks().RetryTask(b, &taskv1.RetryTaskRequest{Id: id}); return err },
	} {
		if err := call(); code(err) != "30004" {
			t.Errorf("%s of another tenant's task: %v", name, err)
		}
	}
	got, err := e.tasks().GetTask(a, &taskv1.GetTaskRequest{Id: id})
	if err != nil || got.GetTask().GetStatus() != "pending" || got.GetTask().GetName() != "secret" {
		t.Fatalf("owner's view changed: %v, %v", got, err)
	}
	// Lists come from a projection that catches up later: once the owner's
	// list shows the task, the other tenant's would show it too if it
	// leaked.
	eventually(t, 10*time.Second, "the owner's list to show the task", func() bool {
		list, err := e.tasks().ListTasks(a, &taskv1.ListTasksRequest{})
		if err != nil {
			t.Fatalf("owner's list: %v", err)
		}
		return len(list.GetTasks()) == 1 && list.GetTasks()[0].GetId() == id
	})
	list, err := e.tasks().ListTasks(b, &taskv1.ListTasksRequest{})
	if err != nil || len(list.GetTasks()) != 0 {
		t.Fatalf("tenant b lists %v, %v", list, err)
	}
	// An agent can act only as itself.
	_, err = e.leases().ClaimTasks(agent("agent-1"), &taskv1.ClaimTasksRequest{AgentId: "agent-2", Limit: 1})
	if err == nil {
		t.Fatal("agent-1 claimed as agent-2")
	}
}
