package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// taskCountsTTL bounds how often a scrape counts: every replica answers
// its own scrapes, and the count walks every unfinished task.
const taskCountsTTL = 10 * time.Second

// liveStatuses are the statuses the task gauge counts: finished tasks
// accumulate for ever and are counted by the taskmesh_tasks_*_total
// counters instead.
var liveStatuses = []string{"pending", "assigned", "running", "preempted", "suspended"}

type taskCount struct {
	status, clusterQueue string
	n                    int64
}

// ObserveTaskCounts exports taskmesh_tasks{status, cluster_queue}, the
// unfinished tasks by status and ClusterQueue ("" for tasks that need no
// admission), counted in the tasks table at most every taskCountsTTL. A
// status with no tasks is reported as 0 for the queue "", so the series
// exist from the start; and taskmesh_agents{state}, the agents live and
// lost. Every replica reports the same numbers: aggregate
// with max, not sum (docs/operations.md). Call stop when the service ends.
func ObserveTaskCounts(db *pgxpool.Pool) (stop func()) {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres")
	gauge, _ := meter.Int64ObservableGauge("taskmesh.tasks",
		metric.WithDescription("unfinished tasks by status and ClusterQueue"), metric.WithUnit("{task}"))
	agents, _ := meter.Int64ObservableGauge("taskmesh.agents",
		metric.WithDescription("executor agents known to the scheduler by state (live, lost: no heartbeat for --agent-lost-after)"),
		metric.WithUnit("{agent}"))
	var (
		mu     sync.Mutex
		counts []taskCount
		live   [2]int64 // agents: live, lost
		at     time.Time
	)
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) >= taskCountsTTL {
			fresh, err := countTasks(ctx, db)
			if err != nil {
				return err // the collection reports it; the last counts are not shown as current
			}
			if live, err = countAgents(ctx, db); err != nil {
				return err
			}
			counts, at = fresh, time.Now()
		}
		o.ObserveInt64(agents, live[0], metric.WithAttributes(attribute.String("state", "live")))
		o.ObserveInt64(agents, live[1], metric.WithAttributes(attribute.String("state", "lost")))
		for _, c := range counts {
			o.ObserveInt64(gauge, c.n, metric.WithAttributes(attribute.String("status", c.status),
				attribute.String("cluster_queue", c.clusterQueue)))
		}
		return nil
	}, gauge, agents)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() } // fails only for a registration of another provider
}

func countTasks(ctx context.Context, db *pgxpool.Pool) ([]taskCount, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := db.Query(ctx, `
		SELECT status, coalesce(doc->>'cluster_queue', ''), count(*)
		FROM tasks WHERE status = ANY($1) AND NOT deleted
		GROUP BY 1, 2`, liveStatuses)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	var out []taskCount
	for rows.Next() {
		var c taskCount
		if err := rows.Scan(&c.status, &c.clusterQueue, &c.n); err != nil {
			return nil, err
		}
		if c.clusterQueue == "" {
			seen[c.status] = true
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, s := range liveStatuses {
		if !seen[s] {
			out = append(out, taskCount{status: s})
		}
	}
	return out, nil
}

// countAgents counts the agents live and lost.
func countAgents(ctx context.Context, db *pgxpool.Pool) (n [2]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT lost), count(*) FILTER (WHERE lost) FROM agents`).Scan(&n[0], &n[1])
	return n, err
}
