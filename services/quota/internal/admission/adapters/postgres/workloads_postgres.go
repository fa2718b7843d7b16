package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// Store implements app.LoopStore and app.DefinitionStore.
type Store struct {
	// DB serves the reads and transactions of app.DefinitionStore, and
	// the loop's lock (Lead), on whose connection its sessions run.
	DB     *pgxpool.Pool
	Events *eventstore.Store
}

var (
	_ app.LoopStore       = Store{}
	_ app.DefinitionStore = Store{}
)

// definitionsGeneration is app.LoopTx.DefinitionsGeneration.
func definitionsGeneration(ctx context.Context, tx pgx.Tx) (int64, error) {
	var gen int64
	if err := tx.QueryRow(ctx, generationSQL).Scan(&gen); err != nil {
		return 0, fmt.Errorf("read definitions generation: %w", err)
	}
	return gen, nil
}

// waiting is app.LoopSession.Waiting. min(seq) rather than EXISTS: a
// generic plan of EXISTS over "seq > $1" expects a third of the table to
// match and scans it from its start, dead rows and all; min is read from
// the seq index.
//
// The loop asks it many times a second while it waits; on its keyed plan
// (pg.QueryKeyed) it is planned once per connection, not on every ask.
func waiting(ctx context.Context, db pg.Batcher, after int64) (int64, bool, error) {
	var gen int64
	var facts bool
	err := pg.QueryKeyed(ctx, db, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&gen, &facts}, func() error { return nil })
		return err
	}, `SELECT (SELECT generation FROM definitions_generation WHERE id = 1),
		(SELECT min(seq) FROM workload_facts WHERE seq > $1) IS NOT NULL`, after)
	if err != nil {
		return 0, false, fmt.Errorf("read what the admission loop waits for: %w", err)
	}
	return gen, facts, nil
}

// loadWorkloads is app.LoopTx.LoadWorkloads: the live workloads. The
// finished ones, most of the table once it has run a while, stay in the
// database; a cycle reads back those its facts name (startCycle). The scan
// runs once per session: an index on state would make every cycle's
// update of a workload's state a non-HOT one.
func loadWorkloads(ctx context.Context, tx pgx.Tx) ([]app.WorkloadRecord, error) {
	rows, err := tx.Query(ctx, `SELECT `+workloadColumns+` FROM workloads WHERE state <> '`+app.StateFinished+`'`)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	out, err := scanWorkloads(rows)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	return out, nil
}

// Workload implements app.DefinitionStore.
func (s Store) Workload(ctx context.Context, taskID string) (app.WorkloadRecord, bool, error) {
	rows, err := s.DB.Query(ctx, `SELECT `+workloadColumns+` FROM workloads WHERE task_id = $1`, taskID)
	if err != nil {
		return app.WorkloadRecord{}, false, fmt.Errorf("read workload: %w", err)
	}
	out, err := scanWorkloads(rows)
	if err != nil || len(out) == 0 {
		return app.WorkloadRecord{}, false, err
	}
	return out[0], true, nil
}

// workloadColumns are the columns scanWorkloads reads, in its order.
const workloadColumns = `task_id, tenant_id, cluster_queue, priority, created_at, requests, task_version, state,
	flavors, borrowing, admitted_at, preemptor, reason, version`

// scanWorkloads reads rows of workloadColumns and closes them.
func scanWorkloads(rows pgx.Rows) ([]app.WorkloadRecord, error) {
	defer rows.Close()
	var out []app.WorkloadRecord
	for rows.Next() {
		var r app.WorkloadRecord
		var admittedAt *time.Time
		if err := rows.Scan(&r.ID, &r.TenantID, &r.ClusterQueue, &r.Priority, &r.Created, &r.Requests, &r.TaskVersion,
			&r.State, &r.Flavors, &r.Borrowing, &admittedAt, &r.Preemptor, &r.Reason, &r.Version); err != nil {
			return nil, fmt.Errorf("read workload: %w", err)
		}
		if admittedAt != nil {
			r.AdmittedAt = *admittedAt
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// startCycle is app.LoopTx.StartCycle: the generation (FOR SHARE, as
// definitionsGeneration), the pending facts and the direct facts' versions
// in one batch, so a cycle spends one round trip before it decides
// instead of three. Under load each round trip waits for the CPU twice
// (the backend's turn, then the loop's), and the loop's cycles are what
// every direct stay waits behind (docs/decisions/0055-direct-admission-of-new-tasks.md).
func startCycle(ctx context.Context, tx pgx.Tx, after int64, limit int, direct []app.Fact) (app.CycleStart, error) {
	var cs app.CycleStart
	b := &pgx.Batch{}
	b.Queue(generationSQL).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&cs.Generation); err != nil {
			return fmt.Errorf("read definitions generation: %w", err)
		}
		return nil
	})
	b.Queue(pendingFactsSQL, after, limit).Query(func(rows pgx.Rows) (err error) {
		cs.Facts, err = scanFacts(rows)
		return err
	})
	var lookup []string
	for _, f := range direct {
		if f.Kind != app.FactFinish {
			lookup = append(lookup, f.TaskID)
		}
	}
	b.Queue(finishedOfFactsSQL, after, limit, lookup).Query(func(rows pgx.Rows) (err error) {
		cs.Finished, err = scanWorkloads(rows)
		return err
	})
	if len(direct) > 0 {
		ids, vers := newestVersions(direct)
		b.Queue(seeFactsSQL, ids, vers).Query(func(rows pgx.Rows) error {
			moved, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("see workload facts: %w", err)
			}
			// The tasks whose version moved: their facts are new (the
			// direct path hands one fact per task).
			for _, f := range direct {
				if slices.Contains(moved, f.TaskID) {
					cs.Direct = append(cs.Direct, f)
				}
			}
			return nil
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return app.CycleStart{}, fmt.Errorf("start admission cycle: %w", err)
	}
	return cs, nil
}

const (
	generationSQL   = `SELECT generation FROM definitions_generation WHERE id = 1 FOR SHARE`
	pendingFactsSQL = `
		SELECT seq, task_id, task_version, kind, tenant_id, cluster_queue, priority, created_at, requests, reason
		FROM workload_facts WHERE seq > $1 ORDER BY seq LIMIT $2`
	// finishedOfFactsSQL reads the finished workloads of the tasks of
	// pendingFactsSQL's facts and of the direct ones ($3): the loop keeps
	// only live workloads, and a fact may start a finished one's next stay
	// or delete it. A finish fact cannot change a workload the loop does
	// not hold, so those tasks are not looked up. Its own snapshot may
	// hold facts committed after pendingFactsSQL's (never fewer: only the
	// loop deletes facts), whose workloads are then read for nothing.
	finishedOfFactsSQL = `
		SELECT ` + workloadColumns + ` FROM workloads
		WHERE state = '` + app.StateFinished + `' AND task_id IN (
		    SELECT task_id FROM (SELECT task_id, kind FROM workload_facts WHERE seq > $1 ORDER BY seq LIMIT $2) f
		    WHERE kind <> '` + string(app.FactFinish) + `'
		    UNION ALL SELECT unnest($3::text[]))`
	// seeFactsSQL records each task's newest version where it is above the
	// one recorded and returns those tasks; an insert or update racing the
	// task-topic projection's waits for it on the row (or its unique key)
	// and then sees its version.
	seeFactsSQL = `
		INSERT INTO workload_task_versions AS w (task_id, version) SELECT * FROM unnest($1::text[], $2::bigint[])
		ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version WHERE w.version < EXCLUDED.version
		RETURNING task_id`
)

// newestVersions are the tasks of facts in id order, as the projection
// writes them (two transactions writing the same tasks' versions lock
// them in one order and never deadlock), with each one's newest version.
func newestVersions(facts []app.Fact) ([]string, []int64) {
	newest := map[string]int64{}
	var ids []string
	for _, f := range facts {
		v, ok := newest[f.TaskID]
		if !ok {
			ids = append(ids, f.TaskID)
		}
		newest[f.TaskID] = max(v, f.TaskVersion)
	}
	slices.Sort(ids)
	vers := make([]int64, len(ids))
	for i, id := range ids {
		vers[i] = newest[id]
	}
	return ids, vers
}

// scanFacts reads the rows of pendingFactsSQL.
func scanFacts(rows pgx.Rows) ([]app.Fact, error) {
	var out []app.Fact
	for rows.Next() {
		var f app.Fact
		var created *time.Time
		var kind string
		if err := rows.Scan(&f.Seq, &f.TaskID, &f.TaskVersion, &kind, &f.TenantID, &f.ClusterQueue, &f.Priority,
			&created, &f.Requests, &f.Reason); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read workload facts: %w", err)
		}
		f.Kind = app.FactKind(kind)
		if created != nil {
			f.Created = *created
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read workload facts: %w", err)
	}
	return out, nil
}

// saveCycle is app.LoopTx.SaveCycle, events appended to es: one round
// trip for the whole cycle.
func saveCycle(ctx context.Context, tx pgx.Tx, es *eventstore.Store, events []eventstore.Event, changed []*app.WorkloadRecord, removed []string, consumed []app.Fact) error {
	b := &pgx.Batch{}
	if err := es.QueueAppend(b, events...); err != nil {
		return err
	}
	appended := len(events) > 0
	if n := len(changed); n > 0 {
		var (
			ids, tenants, queues, states, preemptors, reasons = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			prios                                             = make([]int32, n)
			created                                           = make([]time.Time, n)
			admitted                                          = make([]*time.Time, n)
			reqs, flavors                                     = make([]string, n), make([]*string, n)
			taskVers, vers                                    = make([]int64, n), make([]int64, n)
			borrowing                                         = make([]bool, n)
		)
		for i, r := range changed {
			ids[i], tenants[i], queues[i], states[i], preemptors[i], reasons[i] = r.ID, r.TenantID, r.ClusterQueue, r.State, r.Preemptor, r.Reason
			prios[i], created[i], taskVers[i], vers[i], borrowing[i] = int32(r.Priority), r.Created, r.TaskVersion, r.Version, r.Borrowing
			if !r.AdmittedAt.IsZero() {
				admitted[i] = &r.AdmittedAt
			}
			rb, err := json.Marshal(r.Requests)
			if err != nil {
				return fmt.Errorf("encode requests: %w", err)
			}
			reqs[i] = string(rb)
			if r.Flavors != nil {
				fb, err := json.Marshal(r.Flavors)
				if err != nil {
					return fmt.Errorf("encode flavors: %w", err)
				}
				fs := string(fb)
				flavors[i] = &fs
			}
		}
		b.Queue(`
			INSERT INTO workloads (task_id, tenant_id, cluster_queue, priority, created_at, requests, task_version,
			                       state, flavors, borrowing, admitted_at, preemptor, reason, version)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::jsonb[],
			                     $7::bigint[], $8::text[], $9::jsonb[], $10::bool[], $11::timestamptz[], $12::text[],
			                     $13::text[], $14::bigint[])
			ON CONFLICT (task_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, cluster_queue = EXCLUDED.cluster_queue,
			    priority = EXCLUDED.priority, created_at = EXCLUDED.created_at, requests = EXCLUDED.requests,
			    task_version = EXCLUDED.task_version, state = EXCLUDED.state, flavors = EXCLUDED.flavors,
			    borrowing = EXCLUDED.borrowing, admitted_at = EXCLUDED.admitted_at, preemptor = EXCLUDED.preemptor,
			    reason = EXCLUDED.reason, version = EXCLUDED.version`,
			ids, tenants, queues, prios, created, reqs, taskVers, states, flavors, borrowing, admitted, preemptors, reasons, vers)
	}
	if len(removed) > 0 {
		b.Queue(`DELETE FROM workloads WHERE task_id = ANY($1)`, removed)
	}
	if n := len(consumed); n > 0 {
		// By their range, not "up to the last": the index scan starts at
		// the first, past the dead rows of the facts consumed before.
		b.Queue(`DELETE FROM workload_facts WHERE seq BETWEEN $1 AND $2`, consumed[0].Seq, consumed[n-1].Seq)
	}
	res := tx.SendBatch(ctx, b)
	for i := range b.Len() {
		if _, err := res.Exec(); err != nil {
			res.Close()
			if i == 0 && appended {
				return eventstore.AppendError(err, events)
			}
			return fmt.Errorf("save admission cycle: %w", err)
		}
	}
	return res.Close()
}
