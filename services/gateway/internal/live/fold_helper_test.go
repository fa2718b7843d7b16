package live

import (
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
)

// apply moves t on by ev in place with the scheduler's fold, as the
// streams do, and reports whether ev deleted the task. The fake scheduler
// moves its tasks with it, and TestApply checks the fields a frame shows.
func apply(t *taskv1.Task, ev *taskv1.TaskEvent) (deleted bool) {
	next, deleted, err := lifecycle.Apply(t, ev)
	if err != nil {
		panic(err) // the tests only build events the fold knows
	}
	proto.Reset(t)
	proto.Merge(t, next)
	return deleted
}
