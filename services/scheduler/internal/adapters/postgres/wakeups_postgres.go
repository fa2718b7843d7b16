package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// notifyChannel is the Postgres channel scheduler replicas use to wake each
// other's waiting claims when work appears.
const notifyChannel = "taskmesh_tasks"

// maxPayload is the largest NOTIFY payload sent: Postgres refuses 8,000
// bytes and more.
const maxPayload = 7900

// Wakeups carries app.Hub's work between scheduler replicas with
// LISTEN/NOTIFY: the tasks that appeared, so that each wakes one claim
// there too, or "work appeared" when the hub cannot name them.
type Wakeups struct{ DB *pgxpool.Pool }

// wakeup is a NOTIFY's payload, as JSON. A payload that is not one (a
// replica of an earlier build sends its id alone) wakes every claim.
type wakeup struct {
	From  string       `json:"from"`
	All   bool         `json:"all,omitempty"`
	Tasks []wakeupTask `json:"tasks,omitempty"`
}

// wakeupTask is what a claim's match reads of a task (domain.Task.Matches
// and the caller's tenant).
type wakeupTask struct {
	ID      string   `json:"id"`
	Tenant  string   `json:"tenant"`
	Type    string   `json:"type"`
	Machine string   `json:"machine,omitempty"`
	IP      string   `json:"ip,omitempty"`
	Labels  []string `json:"labels,omitempty"`
}

// encodeWakeup is the payload that names tasks, or, with all set or
// tasks too many to fit, the one that wakes every claim.
func encodeWakeup(from string, tasks []domain.Task, all bool) string {
	if !all {
		out := wakeup{From: from, Tasks: make([]wakeupTask, len(tasks))}
		for i, t := range tasks {
			out.Tasks[i] = wakeupTask{ID: t.ID, Tenant: t.TenantID, Type: t.Spec.Type, Machine: t.Spec.MachineID,
				IP: t.Spec.TargetIP, Labels: t.Spec.Labels}
		}
		if b, err := json.Marshal(out); err == nil && len(b) <= maxPayload {
			return string(b)
		}
	}
	b, _ := json.Marshal(wakeup{From: from, All: true})
	return string(b)
}

// decodeWakeup reads a payload: whether it is this replica's own (from
// self), and otherwise the tasks it names, or all when it names none or
// is not a payload of this format.
func decodeWakeup(payload, self string) (own bool, tasks []domain.Task, all bool) {
	if payload == self {
		return true, nil, false
	}
	var in wakeup
	if err := json.Unmarshal([]byte(payload), &in); err != nil || in.From == "" {
		return false, nil, true
	}
	if in.From == self {
		return true, nil, false
	}
	if in.All || len(in.Tasks) == 0 {
		return false, nil, true
	}
	tasks = make([]domain.Task, 0, len(in.Tasks))
	for _, t := range in.Tasks {
		if t.ID == "" {
			return false, nil, true
		}
		tasks = append(tasks, domain.Task{ID: t.ID, TenantID: t.Tenant, Status: domain.StatusPending,
			Spec: domain.Spec{Type: t.Type, MachineID: t.Machine, TargetIP: t.IP, Labels: t.Labels}})
	}
	return false, tasks, false
}

// pendingTasks returns which of ids are pending: the hub's check before
// it hands another replica's task wake on (app.Hub.SetPendingCheck).
func (w Wakeups) pendingTasks(ctx context.Context, ids []string) ([]string, error) {
	var pending []string
	err := pg.QueryKeyed(ctx, w.DB, func(rows pgx.Rows) (err error) {
		pending, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}, `SELECT id FROM tasks WHERE id = ANY($1::text[]) AND status = 'pending' AND NOT deleted`, ids)
	return pending, err
}

// Run sends a NOTIFY for each of hub's signals to the other replicas, at
// most one per 5 ms (a burst of submissions needs one), and LISTENs for
// theirs, until ctx is done. Losing it only costs latency: waiting claims
// look again every second anyway.
//
// A notification reaches every listener, this replica's too. Each one
// carries its sender's id, and a replica ignores its own: the work it
// signals woke its claims already, and waking them again a few
// milliseconds later would only send them to look once more, keeping the
// claim writers busy with empty claims when the next work appears.
func (w Wakeups) Run(ctx context.Context, hub *app.Hub) {
	self := uuid.NewString()
	hub.SetPendingCheck(w.pendingTasks)
	go w.listen(ctx, hub, self)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hub.OtherReplicas():
			tasks, all := hub.ForOtherReplicas()
			_, _ = w.DB.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, encodeWakeup(self, tasks, all))
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

func (w Wakeups) listen(ctx context.Context, hub *app.Hub, self string) {
	for ctx.Err() == nil {
		conn, err := w.DB.Acquire(ctx)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
			conn.Release()
			sleep(ctx, time.Second)
			continue
		}
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err != nil {
				break
			}
			switch own, tasks, all := decodeWakeup(n.Payload, self); {
			case own:
			case all:
				hub.WakeLocal()
			default:
				hub.OtherReplicaTasks(tasks)
			}
		}
		// The session may be in any state after an error: never reuse it.
		conn.Hijack().Close(context.WithoutCancel(ctx))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
