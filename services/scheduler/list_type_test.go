package scheduler_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// ListTasksRequest.type filters the list over gRPC as ?type= does over
// REST (docs/api/tasks.md, ListTasks): the caller's tasks of that type;
// a type no task can have is InvalidArgument (30005) naming type and the
// types there are.
func TestListTasksByTypeOverGRPC(t *testing.T) {
	e := newEnv(t)
	a, b := user("t1"), user("t2")
	shell := e.create(a, &taskv1.TaskSpec{Name: "s", Command: "true"})
	noop := e.create(a, &taskv1.TaskSpec{Name: "n", Type: "noop"})
	e.create(b, &taskv1.TaskSpec{Name: "theirs", Type: "noop"})
	eventually(t, 10*time.Second, "both of t1's tasks in its list", func() bool {
		list, err := e.tasks().ListTasks(a, &taskv1.ListTasksRequest{})
		return err == nil && len(list.GetTasks()) == 2
	})
	for typ, want := range map[string]string{"noop": noop.GetId(), "shell": shell.GetId()} {
		list, err := e.tasks().ListTasks(a, &taskv1.ListTasksRequest{Type: typ})
		if err != nil || len(list.GetTasks()) != 1 || list.GetTasks()[0].GetId() != want {
			t.Errorf("type %s: %v, %v", typ, list, err)
		}
	}
	_, err := e.tasks().ListTasks(a, &taskv1.ListTasksRequest{Type: "bash"})
	if status.Code(err) != codes.InvalidArgument || code(err) != "30005" ||
		!strings.Contains(err.Error(), "type") || !strings.Contains(err.Error(), "shell, python, script, noop, video") {
		t.Errorf("unknown type: %v", err)
	}
}
