package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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

// Batcher is what QueryKeyed runs on: a pool, a connection or a
// transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// QueryKeyed runs sql, a read that finds its rows through primary keys and
// indexes whose predicates it spells out, on its keyed plan
// (QueueKeyedPlans), and hands its rows to scan. The settings before it
// and their RESET after it (QueueDefaultPlans) travel with it in one
// batch, one round trip: on a pool or a connection the batch is its own
// implicit transaction, and in a transaction the statements after it get
// the connection's own planning back.
//
// Under the pool's custom plans such a read is planned again on every
// execution, which for a lookup by key costs more than running it: about
// a millisecond on a table with many partial indexes, whose predicates
// the planner weighs one by one, on a loaded 2-core machine
// (docs/decisions/0118-frequent-reads-run-on-their-keyed-plans.md).
func QueryKeyed(ctx context.Context, db Batcher, scan func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	QueueKeyedPlans(b)
	b.Queue(sql, args...)
	QueueDefaultPlans(b)
	br := db.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		if err := scan(rows); err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// keyedPlansOn sets both settings in one statement (set_config with
// is_local = true is SET LOCAL).
const keyedPlansOn = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)`

// ReadModelTx readies tx as the batch transaction of a read-model writer
// (a projection runner or an event consumer), in one statement:
//
//   - it commits without waiting for the WAL flush: the batch's rows and
//     its offsets commit together, so a commit lost in a crash loses both
//     and the batch is read again from the broker;
//   - every statement in it runs on its keyed plan (QueueKeyedPlans): the
//     offsets' lock and upsert, and the handler's writes, which find
//     their rows by the records' ids. A handler must keep to keyed
//     statements; one that scans still gets its scan, only slower.
func ReadModelTx(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, readModelTx)
	return err
}

const readModelTx = `SELECT set_config('synchronous_commit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true)`

// KeyedSession makes every statement on conn run on its keyed plan, for a
// connection held through a long session of keyed statements outside
// transactions (a relay's lock connection: its reads by position, its
// checkpoint by key). restore gives conn the pool's settings back; call
// it before the connection returns to the pool. Should restore fail (the
// session broke), the connection carries the settings only as far as
// the pool closes it or its next user's statements: they are slower then,
// never wrong (see QueueKeyedPlans).
func KeyedSession(ctx context.Context, conn *pgxpool.Conn) (restore func(context.Context) error, err error) {
	if _, err := conn.Exec(ctx, keyedSessionOn); err != nil {
		return nil, fmt.Errorf("pg: keyed plans for the session: %w", err)
	}
	return func(ctx context.Context) error {
		b := &pgx.Batch{}
		QueueDefaultPlans(b)
		return conn.SendBatch(ctx, b).Close()
	}, nil
}

const keyedSessionOn = `SELECT set_config('plan_cache_mode', 'force_generic_plan', false), set_config('enable_seqscan', 'off', false)`
