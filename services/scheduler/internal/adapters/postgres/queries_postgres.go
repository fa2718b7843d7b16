package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// claimCandidates locks up to f.Limit claimable tasks for the agent in
// (priority, created_at) order, skipping rows other claims hold (SKIP
// LOCKED: concurrent claims never wait for, or get, the same task). A task
// is claimable when its dependencies completed and, for scatter, when no
// sibling ran on this machine.
//
// Pending tasks are indexed by what may take them, each in exactly one
// of four claim indexes (docs/decisions/0085-history-stays-out-of-the-hot-paths.md):
// open tasks (no labels, no target), tasks for one machine, tasks for one
// address, and labelled tasks by label set. A claim reads only the
// ranges this agent may take — its machine's, its address's, and the
// label sets within its labels, found by a skip scan over the distinct
// sets — each in (priority, created_at) order, and keeps the first
// f.Limit of their union. Pending work only other agents can take (a
// backlog for a GPU pool, tasks for another machine) is never walked. A
// branch may lock a few rows the union then leaves; they stay pending,
// unlocked at commit.
//
// A task whose last event was written by a transaction with a higher id
// than this one is left for a later claim. The relay publishes events in
// transaction-id order (platform/outbox), and a claim grouped behind
// other commands holds an id from before its candidates were last
// written: leasing such a task would put its TaskLeased ahead of the
// event before it on the topic (docs/events.md, ordering). A lone claim
// gets its id as it locks, after every write it can see, so it skips
// nothing.
//
// The statement runs on its generic plan, unlike the pool's other
// statements (platform/pg.Open makes every execution custom-planned).
// Planning it took about 3 ms, twenty times its execution, on every claim;
// its generic plan is the same index scans at every table size, because
// each branch reads a partial index in its ORDER BY order under a LIMIT
// (docs/decisions/0089-the-claim-runs-on-its-generic-plan.md;
// TestClaimRunsOnItsGenericPlan). The setting is the transaction's own
// for this one statement: SET LOCAL before it and RESET after it travel
// with it in one round trip.
//
// An agent the sweeper found lost, and not heard from since, gets no
// candidates (app.TaskStore's Claim): that is asked in the same batch,
// on its generic plan too (a lookup by key), and the candidates it
// locked are left to the next claim.
func claimCandidates(ctx context.Context, tx pgx.Tx, agentID string, f app.ClaimFilter) ([]domain.Task, error) {
	if f.Labels == nil {
		f.Labels = []string{}
	}
	if f.Types == nil {
		f.Types = []string{}
	}
	b := &pgx.Batch{}
	b.Queue(claimPlansOn)
	b.Queue(`SELECT EXISTS (SELECT 1 FROM agents WHERE agent_id = $1 AND lost)`, agentID)
	b.Queue(claimSQL, f.Now, f.Tenant, f.Machine, f.IP, f.Labels, f.Types, f.Limit)
	b.Queue(`RESET plan_cache_mode`)
	b.Queue(`RESET enable_bitmapscan`)
	b.Queue(`RESET enable_seqscan`)
	b.Queue(`RESET jit`)
	br := tx.SendBatch(ctx, b)
	ts, err := claimBatch(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("claim candidates: %w", err)
	}
	return ts, nil
}

// claimPlansOn readies the claim's planning, for the claim alone (SET
// LOCAL, undone by the RESETs after it): its generic plan, with neither
// bitmap nor sequential scans, and no JIT. A generic plan knows none of
// the claim's values, so it puts the share of candidates that pass the
// claim rules at the planner's defaults (a label containment alone at
// 0.5%): about one row of a backlog of thousands. To the planner,
// fetching every candidate of a branch from a bitmap and sorting that one
// row then looks cheaper than walking the index in its order, and that
// plan, kept, read and sorted the whole backlog on every claim: 20–300 ms
// a claim at 1,700 tasks pending on a 2-core machine, against under a
// millisecond for the ordered walk that stops at the LIMIT. Sequential
// scans are off for the reason of every keyed statement
// (pg.QueueKeyedPlans): a plan made on an empty table scanned the events
// for each candidate's check, and kept scanning them as they grew. The
// penalty that disabling puts on a node with no other path lifts the
// plan's cost past every JIT threshold, so JIT is off too: with it on,
// each claim compiled itself, about 1 s a claim
// (docs/decisions/0117-the-claim-walks-its-indexes-in-order.md).
const claimPlansOn = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// claimBatch reads the answers of claimCandidates' batch.
func claimBatch(br pgx.BatchResults) ([]domain.Task, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	var lost bool
	if err := br.QueryRow().Scan(&lost); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return nil, err
	}
	for range 4 { // the RESETs
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	if lost {
		return nil, nil
	}
	return ts, nil
}

// claimPending is the predicate every claim index shares (migrations
// 0050, 0053): the literal text, so the planner matches the partial
// indexes.
const claimPending = `t.status = 'pending' AND NOT t.deleted AND NOT t.awaiting_admission AND NOT t.awaiting_dependencies`

// unmetDependency selects a dependency of task t that has not completed
// (or does not exist): the one rule of when a task may run after others.
// Claims check it themselves; awaiting_dependencies only keeps the tasks
// it holds back out of the claim indexes.
const unmetDependency = `SELECT 1 FROM unnest(t.depends_on) AS d(id) LEFT JOIN tasks dt ON dt.id = d.id
	        WHERE dt.id IS NULL OR dt.status <> 'completed'`

// claimRules are the conditions a candidate must meet besides its index
// range: $1 now, $2 tenant ('*' any), $3 machine, $4 address, $5 the
// agent's labels, $6 types (empty: any). A scatter's tasks share a
// non-empty fan-out id (app's CreateTasks), so its check spells out
// tasks_fanout_idx's predicate (a fan-out id not empty) and probes that index
// instead of reading the table for each scatter candidate.
const claimRules = `t.retry_at <= $1
	  AND ($2 = '*' OR t.tenant_id = $2)
	  AND t.labels <@ $5::text[]
	  AND (cardinality($6::text[]) = 0 OR t.type = ANY($6::text[]))
	  AND (cardinality(t.depends_on) = 0 OR NOT EXISTS (` + unmetDependency + `))
	  AND (NOT t.scatter OR NOT EXISTS (
	        SELECT 1 FROM tasks s WHERE s.fanout_id <> '' AND s.fanout_id = t.fanout_id AND s.assigned_machine_id = $3 AND s.id <> t.id))
	  AND NOT EXISTS (
	        SELECT 1 FROM events e WHERE e.aggregate_id = t.id AND e.tx_id > pg_current_xact_id())`

// claimLabelled is the labelled index's predicate.
const claimLabelled = claimPending + ` AND t.machine_id = '' AND t.target_ip = '' AND t.labels <> '{}'`

// claimSQL takes $7 candidates from each range the agent may take, then
// the first $7 of them.
var claimSQL = `
	WITH RECURSIVE
	open AS (
		SELECT t.doc, t.priority, t.created_at FROM tasks t
		WHERE ` + claimPending + ` AND t.labels = '{}' AND t.machine_id = '' AND t.target_ip = ''
		  AND ` + claimRules + `
		ORDER BY t.priority, t.created_at LIMIT $7 FOR UPDATE SKIP LOCKED),
	for_machine AS (
		SELECT t.doc, t.priority, t.created_at FROM tasks t
		WHERE ` + claimPending + ` AND t.machine_id <> '' AND t.machine_id = $3
		  AND (t.target_ip = '' OR t.target_ip = $4) AND ` + claimRules + `
		ORDER BY t.priority, t.created_at LIMIT $7 FOR UPDATE SKIP LOCKED),
	for_address AS (
		SELECT t.doc, t.priority, t.created_at FROM tasks t
		WHERE ` + claimPending + ` AND t.machine_id = '' AND t.target_ip <> '' AND t.target_ip = $4
		  AND ` + claimRules + `
		ORDER BY t.priority, t.created_at LIMIT $7 FOR UPDATE SKIP LOCKED),
	-- The distinct label sets of labelled pending tasks, one index probe
	-- each (a skip scan); none when the agent has no labels.
	label_sets(labels) AS (
		(SELECT t.labels FROM tasks t WHERE cardinality($5::text[]) > 0 AND ` + claimLabelled + `
		 ORDER BY t.labels LIMIT 1)
		UNION ALL
		SELECT (SELECT t.labels FROM tasks t WHERE ` + claimLabelled + ` AND t.labels > s.labels
		        ORDER BY t.labels LIMIT 1)
		FROM label_sets s WHERE s.labels IS NOT NULL),
	labelled AS (
		SELECT c.doc, c.priority, c.created_at FROM label_sets s CROSS JOIN LATERAL (
			SELECT t.doc, t.priority, t.created_at FROM tasks t
			WHERE ` + claimLabelled + ` AND t.labels = s.labels AND s.labels <@ $5::text[] AND ` + claimRules + `
			ORDER BY t.priority, t.created_at LIMIT $7 FOR UPDATE SKIP LOCKED) c
		WHERE s.labels IS NOT NULL AND s.labels <@ $5::text[])
	SELECT doc FROM (
		SELECT * FROM open UNION ALL SELECT * FROM for_machine
		UNION ALL SELECT * FROM for_address UNION ALL SELECT * FROM labelled) c
	ORDER BY priority, created_at
	LIMIT $7`

// priorClaim returns the task ids leased by an earlier claim with the same
// agent and request id, or ok=false. Every claim asks, so it runs on its
// keyed plan (pg.QueryKeyed), a lookup by the claims' key.
func priorClaim(ctx context.Context, db pg.Batcher, agentID, requestID string) (ids []string, ok bool, err error) {
	err = pg.QueryKeyed(ctx, db, func(rows pgx.Rows) error {
		for rows.Next() {
			ok = true
			if err := rows.Scan(&ids); err != nil {
				return err
			}
		}
		return rows.Err()
	}, `SELECT task_ids FROM claims WHERE agent_id = $1 AND request_id = $2`, agentID, requestID)
	if err != nil {
		return nil, false, fmt.Errorf("prior claim: %w", err)
	}
	return ids, ok, nil
}

// recordClaim remembers a claim's tasks for its retries.
func recordClaim(ctx context.Context, tx pgx.Tx, agentID, requestID string, ids []string, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO claims (agent_id, request_id, task_ids, created_at) VALUES ($1, $2, $3, $4)`,
		agentID, requestID, nonNil(ids), now)
	if err != nil {
		return fmt.Errorf("record claim: %w", err)
	}
	return nil
}

// getMany returns tasks by id in the given order (missing ones skipped).
func getMany(ctx context.Context, q Querier, ids []string) ([]domain.Task, error) {
	rows, err := q.Query(ctx, `SELECT t.doc FROM unnest($1::text[]) WITH ORDINALITY AS x(id, ord)
		JOIN tasks t ON t.id = x.id ORDER BY x.ord`, ids)
	if err != nil {
		return nil, fmt.Errorf("get tasks: %w", err)
	}
	return scanTasks(rows)
}

// missingTasks returns which of ids are not tasks of tenant.
func missingTasks(ctx context.Context, q Querier, tenant string, ids []string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT x.id FROM unnest($1::text[]) AS x(id)
		WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = x.id AND t.tenant_id = $2 AND NOT t.deleted)`, ids, tenant)
	if err != nil {
		return nil, fmt.Errorf("check tasks: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// tasksNamed maps the names among names that tenant's creates were given
// to the first task of that create (create_requests' primary key), and
// the others that are keys of released members of tenant's groups to the
// member's task in the newest such group (task_group_members_key_idx).
func tasksNamed(ctx context.Context, q Querier, tenant string, names []string) (map[string]string, error) {
	rows, err := q.Query(ctx, `WITH created AS (
			SELECT r.request_id AS name, r.task_ids[1] AS task_id FROM create_requests r
			WHERE r.tenant_id = $1 AND r.request_id = ANY($2::text[]) AND cardinality(r.task_ids) > 0)
		(SELECT name, task_id FROM created)
		UNION ALL
		(SELECT DISTINCT ON (m.key) m.key, m.task_id FROM task_group_members m JOIN task_groups g ON g.id = m.group_id
			WHERE m.key = ANY($2::text[]) AND m.task_id <> '' AND g.tenant_id = $1 AND NOT g.deleted
				AND m.key NOT IN (SELECT name FROM created)
			ORDER BY m.key, g.created_at DESC, g.id DESC)`, tenant, names)
	if err != nil {
		return nil, fmt.Errorf("tasks by name: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, id string
		if err := rows.Scan(&name, &id); err != nil {
			return nil, fmt.Errorf("tasks by name: %w", err)
		}
		out[name] = id
	}
	return out, rows.Err()
}

// byAttemptsSQL selects the tasks of agent $1 whose current attempt is one
// of $2, while the attempt is leased, cancelled, preempted or suspended
// (the states in which an agent may still run it).
const byAttemptsSQL = `SELECT doc FROM tasks WHERE agent_id = $1
	AND status IN ('assigned', 'running', 'cancelled', 'preempted', 'suspended')
	AND attempt_id = ANY($2::text[])`

// unheldSQL selects the ids of agent $1's assigned tasks whose attempt is
// none of $2, the attempts the agent holds: leases it never received.
const unheldSQL = `SELECT id FROM tasks WHERE status = 'assigned' AND agent_id = $1 AND NOT (attempt_id = ANY($2))`

// videoTasksCreatedBefore returns up to limit video tasks (any tenant)
// submitted before before, oldest first; removed ones are skipped. The
// type is a literal so the partial index tasks_video_created_idx serves the
// query.
func videoTasksCreatedBefore(ctx context.Context, q Querier, before time.Time, limit int) ([]domain.Task, error) {
	rows, err := q.Query(ctx, `SELECT doc FROM tasks WHERE type = 'video' AND NOT deleted AND created_at < $1
		ORDER BY created_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("video tasks created before %s: %w", before.Format(time.RFC3339), err)
	}
	return scanTasks(rows)
}

// preemptedOfSQL selects the tasks with an admission (a cluster queue)
// that were preempted while agent $1 ran them; their quota comes back once
// the agent has stopped them.
const preemptedOfSQL = `SELECT doc FROM tasks WHERE status = 'preempted' AND agent_id = $1
	AND doc->>'cluster_queue' IS NOT NULL`
