package scheduler_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// A group's webhook is every member's and every repeat run's, unless the
// member names its own: the member tasks carry it, and the consumers
// notify it as they notify any task's (docs/api/webhooks.md). A bad URL is
// refused with the member's field named, and nothing is stored.
func TestGroupWebhookReachesItsTasks(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	created, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Name: "hooked", Mode: "parallel", Start: proto.Bool(true),
		Webhook: &taskv1.Webhook{Url: "https://hooks.example.com/group"},
		Tasks: []*taskv1.TaskGroupTask{{Id: "a", Name: "a", Command: "true"},
			{Id: "b", Name: "b", Command: "true", Webhook: &taskv1.Webhook{Url: "https://hooks.example.com/own"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// GetTaskGroup shows the group's own endpoint (never a secret: a
	// webhook has none of its own).
	got, err := e.groups().GetTaskGroup(ctx, &taskv1.GetTaskGroupRequest{Id: created.GetGroup().GetId()})
	if err != nil || got.GetGroup().GetWebhook().GetUrl() != "https://hooks.example.com/group" ||
		created.GetGroup().GetWebhook().GetUrl() != "https://hooks.example.com/group" {
		t.Errorf("the group's webhook: get %v, %v; create %v", got.GetGroup().GetWebhook(), err, created.GetGroup().GetWebhook())
	}
	want := map[string]string{"a": "https://hooks.example.com/group", "b": "https://hooks.example.com/own"}
	for _, m := range created.GetGroup().GetTasks() {
		got, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: m.GetTaskId()})
		if err != nil || got.GetTask().GetWebhook().GetUrl() != want[m.GetId()] {
			t.Errorf("member %s: %v, %v; want webhook %s", m.GetId(), got, err, want[m.GetId()])
		}
	}
	rep, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Start: proto.Bool(true), Webhook: &taskv1.Webhook{Url: "https://hooks.example.com/runs"},
		Repeat: &taskv1.RepeatPolicy{Count: 2, Template: &taskv1.TaskSpec{Name: "run", Command: "true"}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Name: "plain", Mode: "serial",
		Tasks: []*taskv1.TaskGroupTask{{Id: "a", Name: "a", Command: "true"}}})
	if err != nil || plain.GetGroup().Webhook != nil {
		t.Errorf("a group without a webhook shows %v (%v)", plain.GetGroup().GetWebhook(), err)
	}
	runs := 0
	for _, m := range rep.GetGroup().GetTasks() {
		if m.GetTaskId() == "" {
			continue
		}
		runs++
		got, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: m.GetTaskId()})
		if err != nil || got.GetTask().GetWebhook().GetUrl() != "https://hooks.example.com/runs" {
			t.Errorf("run %s: %v, %v", m.GetId(), got, err)
		}
	}
	if runs == 0 {
		t.Fatalf("the repeat released no run: %v", rep.GetGroup())
	}
	before := e.count(`SELECT count(*) FROM task_groups`)
	_, err = e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Mode: "serial",
		Tasks: []*taskv1.TaskGroupTask{{Id: "a", Name: "a", Command: "true", Webhook: &taskv1.Webhook{Url: "ftp://hooks.example.com/x"}}}})
	if code(err) != "30005" || !strings.Contains(err.Error(), "tasks[0].webhook.url") {
		t.Errorf("a bad member webhook: %v", err)
	}
	if after := e.count(`SELECT count(*) FROM task_groups`); after != before {
		t.Errorf("%d groups after a refusal, %d before", after, before)
	}
}
