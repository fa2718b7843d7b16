package scheduler

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	pipelinepg "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/adapters/postgres"
	pipelinedomain "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// RebuildReport says what RebuildInlineProjection found.
type RebuildReport struct {
	Tasks, Groups, Templates, Services, Events int
	// Differences are the tasks (their ids), task groups ("task_group/<id>"),
	// templates ("template/<tenant>/<id>") and managed services
	// ("managed_service/<id>") whose rebuilt rows differ
	// from the live ones (compared before the live rows are replaced).
	Differences []string
}

// RebuildInlineProjection recomputes the inline projections — the tasks
// table, the task groups with their members, the templates, the managed
// services — from the
// event store alone and reports every aggregate whose live rows disagreed.
// With apply it replaces the live rows (in one transaction, so readers
// never see a half-rebuilt table); without, it only compares.
func RebuildInlineProjection(ctx context.Context, pool *pgxpool.Pool, apply bool) (RebuildReport, error) {
	var rep RebuildReport
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Block writers: the comparison must see events and rows at one point.
		if _, err := tx.Exec(ctx, `LOCK TABLE tasks, task_groups, task_group_members, templates, managed_services IN SHARE MODE`); err != nil {
			return err
		}
		if err := rebuildOrchestration(ctx, tx, &rep, apply); err != nil {
			return err
		}
		if err := rebuildManaged(ctx, tx, &rep, apply); err != nil {
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

// PipelineRebuildReport says what RebuildPipelineJobs found.
type PipelineRebuildReport struct {
	Jobs, Events int
	// Differences are jobs whose rebuilt row differs from the live one.
	Differences []string
}

// RebuildPipelineJobs recomputes the pipeline's jobs table (pool's
// search_path starts with PipelineSchema) from its event store alone and
// reports every job whose live row disagreed; with apply it replaces the
// rows, in one transaction.
func RebuildPipelineJobs(ctx context.Context, pool *pgxpool.Pool, apply bool) (PipelineRebuildReport, error) {
	var rep PipelineRebuildReport
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE jobs IN SHARE MODE`); err != nil {
			return err
		}
		n, err := pipelinepg.Rebuild(ctx, tx, func(jobs []pipelinedomain.Job) error {
			rep.Jobs = len(jobs)
			for _, j := range jobs {
				live, err := pipelinepg.Row(ctx, tx, j.ID)
				if err != nil || !reflect.DeepEqual(live, j) {
					rep.Differences = append(rep.Differences, j.ID)
				}
			}
			if !apply {
				return nil
			}
			if _, err := tx.Exec(ctx, `TRUNCATE jobs`); err != nil {
				return err
			}
			for _, j := range jobs {
				if err := pipelinepg.Upsert(ctx, tx, j); err != nil {
					return err
				}
			}
			return nil
		})
		rep.Events = n
		return err
	})
	return rep, err
}
