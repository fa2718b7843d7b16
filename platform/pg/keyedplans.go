package pg

import "github.com/jackc/pgx/v5"

// Keyed statements — those that find their rows by a primary key or by an
// index whose predicate they spell out literally, never by scanning a
// table — are the hot writes of a queue: lock these tasks, update these
// rows, append these events. Under the pool's default (every execution
// custom-planned, see Open) Postgres plans each of them again on every
// execution, and for such a statement planning costs more than running it.
//
// QueueKeyedPlans makes the statements queued after it, up to
// QueueDefaultPlans or the end of the transaction, run on their generic
// plans, made once per connection and statement, with sequential scans
// disabled. Disabling them is what makes a generic plan safe to keep: a
// plan made while a table was nearly empty would otherwise scan it (a scan
// of one page is cheaper than an index probe) and keep scanning it long
// after it grew, because nothing re-plans a cached statement until the
// table is analyzed. With sequential scans disabled the planner takes the
// index wherever one applies, and for a keyed statement that is the right
// plan at every table size. A statement that has no usable index still
// gets its scan (the setting only penalises it), so a mistake costs speed,
// never correctness
// (docs/decisions/0094-keyed-statements-run-on-generic-plans.md).
//
// Both settings are the transaction's own (SET LOCAL); they must be sent
// inside a transaction.
func QueueKeyedPlans(b *pgx.Batch) {
	b.Queue(keyedPlansOn)
}

// QueueDefaultPlans gives the statements queued after it the connection's
// own planning settings again (the pool's, or those its URL set).
func QueueDefaultPlans(b *pgx.Batch) {
	b.Queue(`RESET plan_cache_mode`)
	b.Queue(`RESET enable_seqscan`)
}

// keyedPlansOn sets both settings in one statement (set_config with
// is_local = true is SET LOCAL).
const keyedPlansOn = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)`
