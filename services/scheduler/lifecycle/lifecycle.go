// Package lifecycle is the task lifecycle every Taskmesh service shares: the
// task statuses, and the fold of task events onto a task as the task API
// shows it. Both are the scheduler's own (its domain's Status and Apply,
// re-exported), so the gateway's live streams, the executor's journal and
// the operator CLI cannot drift from the scheduler: a new status or a new
// event is one change in the scheduler's domain, and every user of this
// package follows.
//
// Adding a task event is described in the scheduler domain's package doc
// (services/scheduler/internal/domain); package lifecycletest checks that
// a consumer of the task topic has a case for every event.
package lifecycle

import (
	"errors"
	"fmt"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// Status is a task's state, spelled as the task API shows it (Task.status).
type Status = domain.Status

// The task statuses.
const (
	StatusPending   = domain.StatusPending
	StatusAssigned  = domain.StatusAssigned
	StatusRunning   = domain.StatusRunning
	StatusCompleted = domain.StatusCompleted
	StatusFailed    = domain.StatusFailed
	StatusCancelled = domain.StatusCancelled
	StatusPreempted = domain.StatusPreempted
	StatusSuspended = domain.StatusSuspended
)

// Statuses lists every status in lifecycle order. Status.Final reports the
// end states (completed, failed, cancelled); a failed task may still be
// retried, but only by a RetryScheduled committed with the failure or a
// manual retry.
func Statuses() []Status { return domain.Statuses() }

// Types lists the task types (shell, python, script, noop, video).
func Types() []string { return domain.Types() }

// ErrUnknownEvent is returned by Apply for an envelope whose event this
// build of the scheduler has no case for: none at all, or one added to the
// proto after it was built.
var ErrUnknownEvent = errors.New("lifecycle: unknown task event")

// Apply moves task — as GetTask shows it at the version before ev — on by
// ev with the scheduler's fold, and returns the task as GetTask shows it at
// ev's version. deleted reports that ev deleted or expired the task (GetTask
// no longer shows it then; next is the task as it was, at ev's version).
// task is not modified.
//
// next equals what GetTask would answer because it is the same fold and the
// same rendering; the scheduler's codec tests check that rendering and
// reading back lose nothing the fold needs.
func Apply(task *taskv1.Task, ev *taskv1.TaskEvent) (next *taskv1.Task, deleted bool, err error) {
	r, err := codec.Record(ev)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrUnknownEvent, err)
	}
	if !domain.Handles(r.Event) {
		return nil, false, fmt.Errorf("%w: %s v%d: %s has no case in the fold", ErrUnknownEvent,
			ev.GetAggregateId(), ev.GetVersion(), r.Event.EventName())
	}
	t := domain.Apply(taskproto.TaskFromProto(task), r)
	t.Version = ev.GetVersion()
	return taskproto.TaskToProto(t), t.Deleted, nil
}
