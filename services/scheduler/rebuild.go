package scheduler

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// RebuildReport says what RebuildInlineProjection found.
type RebuildReport struct {
	Tasks, Groups, Templates, Events int
	// Differences are the tasks (their ids), task groups ("task_group/<id>")
	// and templates ("template/<tenant>/<id>") whose rebuilt rows differ
	// from the live ones (compared before the live rows are replaced).
	Differences []string
}

// RebuildInlineProjection recomputes the inline projections — the tasks
// table, the task groups with their members, the templates — from the
// event store alone and reports every aggregate whose live rows disagreed.
// With apply it replaces the live rows (in one transaction, so readers
// never see a half-rebuilt table); without, it only compares.
func RebuildInlineProjection(ctx context.Context, pool *pgxpool.Pool, apply bool) (RebuildReport, error) {
	var rep RebuildReport
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Block writers: the comparison must see events and rows at one point.
		if _, err := tx.Exec(ctx, `LOCK TABLE tasks, task_groups, task_group_members, templates IN SHARE MODE`); err != nil {
			return err
		}
		if err := rebuildOrchestration(ctx, tx, &rep, apply); err != nil {
			return err
		}
		rebuilt := map[string]domain.Task{}
		var order []string
		err := eventstore.New().Rebuild(ctx, tx, postgres.AggregateType, 2000, func(ctx context.Context, page []eventstore.Event) error {
			for _, e := range page {
				_, r, err := codec.Unmarshal(e.Payload)
				if err != nil {
					return fmt.Errorf("event %d: %w", e.ID, err)
				}
				t, seen := rebuilt[e.AggregateID]
				if !seen {
					order = append(order, e.AggregateID)
				}
				rebuilt[e.AggregateID] = domain.Apply(t, r)
				rep.Events++
			}
			return nil
		})
		if err != nil {
			return err
		}
		rep.Tasks = len(order)
		for _, id := range order {
			live, err := postgres.Get(ctx, tx, "*", id)
			want := rebuilt[id]
			if want.Deleted {
				if err == nil {
					rep.Differences = append(rep.Differences, id)
				}
				continue
			}
			if err != nil || !postgres.SameDoc(live, want) {
				rep.Differences = append(rep.Differences, id)
			}
		}
		if !apply {
			return nil
		}
		return replaceTasks(ctx, tx, rebuilt, order)
	})
	return rep, err
}

// replaceTasks replaces every row of the tasks table with the rebuilt
// tasks, in the order their first events were recorded.
func replaceTasks(ctx context.Context, tx pgx.Tx, rebuilt map[string]domain.Task, order []string) error {
	if _, err := tx.Exec(ctx, `TRUNCATE tasks`); err != nil {
		return err
	}
	tasks := make([]domain.Task, 0, len(order))
	for _, id := range order {
		tasks = append(tasks, rebuilt[id])
	}
	for len(tasks) > 0 {
		n := min(len(tasks), 1000)
		if err := postgres.Upsert(ctx, tx, tasks[:n]...); err != nil {
			return err
		}
		tasks = tasks[n:]
	}
	return nil
}
