package scheduler_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Records on the task topic that the relay never published — an event
// past a gap, at the largest version, at version 0, of another tenant, or
// about a task that was never submitted — are parked by task_views, not
// folded: the running task they name still moves on with its real next
// event (a cancel), no phantom task is listed, and a replay equals the
// live table.
func TestTaskViewsParkEventsOutOfSequence(t *testing.T) {
	e := newEnv(t)
	task := e.create(user("t1"), &taskv1.TaskSpec{Name: "victim", Command: "sleep", Args: []string{"60"}})
	claimed := e.claim("agent-1", "m1", 1)
	if len(claimed) != 1 {
		t.Fatalf("claimed %d tasks", len(claimed))
	}
	if _, err := e.leases().StartTask(agent("agent-1"), &taskv1.StartTaskRequest{TaskId: task.GetId(), AgentId: "agent-1",
		AttemptId: claimed[0].GetAttemptId()}); err != nil {
		t.Fatal(err)
	}
	listed := func(tenant string) map[string]*taskv1.Task {
		resp, err := e.tasks().ListTasks(user(tenant), &taskv1.ListTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*taskv1.Task{}
		for _, l := range resp.GetTasks() {
			out[l.GetId()] = l
		}
		return out
	}
	eventually(t, 30*time.Second, "the task listed running", func() bool { return listed("t1")[task.GetId()].GetStatus() == "running" })

	now := e.clock.Now().UTC()
	forge := func(eventID, taskID, tenant string, version int64, ev domain.Event) *kgo.Record {
		value, err := codec.Marshal(eventID, taskID, tenant, version, domain.Record{Event: ev, At: now, Actor: "forger"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: scheduler.Topic, Key: []byte(taskID), Value: value}
	}
	forged := []*kgo.Record{
		forge("forged-1", task.GetId(), "t1", 8, domain.Succeeded{AttemptID: claimed[0].GetAttemptId()}),
		forge("forged-2", task.GetId(), "t1", math.MaxInt64, domain.Progressed{AttemptID: claimed[0].GetAttemptId(), Progress: 50}),
		forge("forged-3", task.GetId(), "t1", 0, domain.Progressed{AttemptID: claimed[0].GetAttemptId(), Progress: 60}),
		forge("forged-4", task.GetId(), "t2", 4, domain.Progressed{AttemptID: claimed[0].GetAttemptId(), Progress: 70}),
		forge("forged-5", "never-submitted", "t1", 1, domain.Succeeded{AttemptID: "a"}),
	}
	opts, err := e.broker.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), forged...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The task's real next event comes after them on its partition.
	if _, err := e.tasks().CancelTask(user("t1"), &taskv1.CancelTaskRequest{Id: task.GetId()}); err != nil {
		t.Fatal(err)
	}
	operator := as(authn.Principal{Kind: authn.KindAdmin, Subject: "op"})
	dead := deadletterv1.NewDeadLetterServiceClient(e.conn)
	eventually(t, 60*time.Second, "the cancel listed and the forged records parked", func() bool {
		dl, err := dead.ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{})
		return err == nil && len(dl.GetDeadLetters()) == len(forged) && listed("t1")[task.GetId()].GetStatus() == "cancelled"
	})
	if _, ok := listed("t1")["never-submitted"]; ok {
		t.Error("a task that was never submitted is listed")
	}
	if n := len(listed("t2")); n != 0 {
		t.Errorf("tenant t2 lists %d tasks", n)
	}
	for _, spec := range scheduler.ReplaySpecs(e.broker.Config()) {
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Equal() {
			t.Errorf("replay of %s = %+v", spec.Name, rep)
		}
	}
}
