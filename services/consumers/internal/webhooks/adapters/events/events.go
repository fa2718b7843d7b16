// Package events turns task events into what notifications read
// (domain.Event), and orchestration events into what group notifications
// read (domain.GroupEvent): the convert steps of the webhook consumers. A task
// notifies when it completes, fails for good (a failure a retry follows is
// not the end) or is cancelled. Every task event has a case; the
// lifecycle coverage test fails for a new one until it has.
package events

import (
	"errors"
	"fmt"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// ConvertOrchestration reads one orchestration event for group
// notifications: a group's creation sets its own endpoint (Spec), its
// completion, failure or cancellation ends it (Final, one notification),
// a repeat's breaker opening is an alert, its deletion forgets it (Gone);
// no other group or template event notifies (the members notify as
// tasks). An event without a case is ErrNoCase.
func ConvertOrchestration(ev *taskv1.OrchestrationEvent) (domain.GroupEvent, error) {
	e := domain.GroupEvent{EventID: pg.CleanText(ev.GetEventId()), GroupID: pg.CleanText(ev.GetAggregateId()),
		TenantID: pg.CleanText(ev.GetTenantId()), At: ev.GetOccurredAt().AsTime().UTC()}
	final := func(status string) { e.Kind, e.Status = domain.Final, status }
	switch x := ev.GetEvent().(type) {
	case *taskv1.OrchestrationEvent_TaskGroupCreated:
		e.Kind, e.URL = domain.Spec, pg.CleanText(x.TaskGroupCreated.GetWebhookUrl())
	case *taskv1.OrchestrationEvent_TaskGroupCompleted:
		final(domain.StatusCompleted)
	case *taskv1.OrchestrationEvent_TaskGroupFailed:
		final(domain.StatusFailed)
	case *taskv1.OrchestrationEvent_TaskGroupCanceled:
		final(domain.StatusCancelled)
	case *taskv1.OrchestrationEvent_TaskGroupCircuitOpened:
		e.Kind = domain.Alert
	case *taskv1.OrchestrationEvent_TaskGroupDeleted:
		e.Kind = domain.Gone
	case *taskv1.OrchestrationEvent_TaskGroupStarted, *taskv1.OrchestrationEvent_TaskGroupMembersReleased,
		*taskv1.OrchestrationEvent_TaskGroupMembersChanged, *taskv1.OrchestrationEvent_TaskGroupRepeatReset,
		*taskv1.OrchestrationEvent_TemplateCreated, *taskv1.OrchestrationEvent_TemplateUpdated,
		*taskv1.OrchestrationEvent_TemplateDeleted:
		// The group goes on (its members notify as tasks); templates never
		// notify.
	default:
		return e, fmt.Errorf("%w: orchestration event %s v%d", ErrNoCase, ev.GetAggregateId(), ev.GetVersion())
	}
	return e, nil
}

// ErrNoCase is returned for an event without a case.
var ErrNoCase = errors.New("webhooks: no case for the task event")

// Convert reads one task event.
func Convert(ev *taskv1.TaskEvent) (domain.Event, error) {
	e := domain.Event{EventID: pg.CleanText(ev.GetEventId()), TaskID: pg.CleanText(ev.GetAggregateId()),
		TenantID: pg.CleanText(ev.GetTenantId()), Version: ev.GetVersion(), At: ev.GetOccurredAt().AsTime().UTC()}
	final := func(status string) { e.Kind, e.Status = domain.Final, status }
	switch x := ev.GetEvent().(type) {
	case *taskv1.TaskEvent_Submitted:
		e.Kind, e.URL, e.Submission = domain.Spec, pg.CleanText(x.Submitted.GetSpec().GetWebhook().GetUrl()), true
	case *taskv1.TaskEvent_Updated:
		e.Kind, e.URL = domain.Spec, pg.CleanText(x.Updated.GetSpec().GetWebhook().GetUrl())
	case *taskv1.TaskEvent_Succeeded:
		final(domain.StatusCompleted)
	case *taskv1.TaskEvent_Failed:
		if !x.Failed.GetRetryFollows() {
			final(domain.StatusFailed)
		}
	case *taskv1.TaskEvent_LeaseExpired:
		if x.LeaseExpired.GetFailed() {
			final(domain.StatusFailed)
		}
	case *taskv1.TaskEvent_Canceled:
		final(domain.StatusCancelled)
	case *taskv1.TaskEvent_Admitted, *taskv1.TaskEvent_Leased, *taskv1.TaskEvent_Started, *taskv1.TaskEvent_Progressed,
		*taskv1.TaskEvent_LeaseRenewed, *taskv1.TaskEvent_RetryScheduled, *taskv1.TaskEvent_Preempted,
		*taskv1.TaskEvent_Suspended, *taskv1.TaskEvent_Requeued, *taskv1.TaskEvent_Deleted, *taskv1.TaskEvent_Expired,
		*taskv1.TaskEvent_Checkpointed, *taskv1.TaskEvent_DependenciesMet:
		// Not an end the tenant is told about: the task goes on, or it is
		// removed after it ended (and was notified then).
	default:
		return e, fmt.Errorf("%w: task %s v%d", ErrNoCase, ev.GetAggregateId(), ev.GetVersion())
	}
	return e, nil
}
