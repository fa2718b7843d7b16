package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// submitNUL records a task named "x\x00". The API may refuse such a name
// (the edges do); then it is recorded as an older scheduler would have,
// through the same event store and outbox, so the read side meets it
// either way.
func (e *env) submitNUL(tenant string) string {
	e.t.Helper()
	resp, err := e.tasks().CreateTask(user(tenant), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "x\x00", Command: "true"}})
	if err == nil {
		return resp.GetTask().GetId()
	}
	e.t.Logf("the API refuses the name (%v); recording the event as an older scheduler did", err)
	spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "x", Command: "true"})
	if err != nil {
		e.t.Fatal(err)
	}
	spec.Name = "x\x00"
	id := uuid.Must(uuid.NewV7()).String()
	store := postgres.NewTaskStore(e.pool, postgres.TaskStoreOptions{})
	defer store.Close()
	now := e.clock.Now().UTC()
	if _, err := store.Create(context.Background(), app.NewTasks{Tenant: tenant, At: now,
		Tasks: [][]domain.Record{domain.Submit(now, id, tenant, "key-"+tenant, "", "", spec, "")}}); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// The task named "x\x00" goes through the real pipeline — event store,
// outbox relay, Kafka, the task_views projection — and runs: lists keep
// working (it is listed with U+FFFD for the NUL, and so are the tasks
// created after it), nothing is parked, and a replay equals the live
// table.
func TestTaskWithNULNameKeepsListsWorking(t *testing.T) {
	e := newEnv(t)
	nul := e.submitNUL("t1")
	after := e.create(user("t1"), &taskv1.TaskSpec{Name: "after", Command: "true"})

	claimed := e.claim("agent-1", "m1", 10)
	for _, c := range claimed {
		if _, err := e.leases().StartTask(agent("agent-1"), &taskv1.StartTaskRequest{TaskId: c.GetId(), AgentId: "agent-1",
			AttemptId: c.GetAttemptId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: c.GetId(), AgentId: "agent-1",
			AttemptId: c.GetAttemptId(), ExitCode: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if len(claimed) != 2 {
		t.Fatalf("claimed %d tasks, want 2", len(claimed))
	}
	listed := func() map[string]*taskv1.Task {
		resp, err := e.tasks().ListTasks(user("t1"), &taskv1.ListTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*taskv1.Task{}
		for _, task := range resp.GetTasks() {
			out[task.GetId()] = task
		}
		return out
	}
	eventually(t, 30*time.Second, "both tasks listed as completed", func() bool {
		l := listed()
		return l[nul].GetStatus() == "completed" && l[after.GetId()].GetStatus() == "completed"
	})
	if got := listed()[nul].GetName(); got != "x\uFFFD" {
		t.Errorf("listed name = %q", got)
	}
	operator := as(authn.Principal{Kind: authn.KindAdmin, Subject: "op"})
	dl, err := deadletterv1.NewDeadLetterServiceClient(e.conn).ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{})
	if err != nil || len(dl.GetDeadLetters()) != 0 {
		t.Errorf("dead letters = %v, %v", dl, err)
	}
	for _, spec := range scheduler.ReplaySpecs(e.broker.Config()) {
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Equal() || rep.Skipped != 0 {
			t.Errorf("replay of %s = %+v", spec.Name, rep)
		}
	}
}
