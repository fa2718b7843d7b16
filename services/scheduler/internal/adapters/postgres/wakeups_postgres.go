package postgres

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// notifyChannel is the Postgres channel scheduler replicas use to wake each
// other's waiting claims when work appears.
const notifyChannel = "taskmesh_tasks"

// Wakeups carries app.Hub's "work appeared" between scheduler replicas
// with LISTEN/NOTIFY.
type Wakeups struct{ DB *pgxpool.Pool }

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
	go w.listen(ctx, hub, self)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hub.OtherReplicas():
			_, _ = w.DB.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, self)
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
			if n.Payload != self {
				hub.WakeLocal()
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
