package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// ErrNothingApplied is returned by Replay for a projection that has not
// applied a record of a topic that has some (it never ran, or not yet).
var ErrNothingApplied = errors.New("has applied nothing yet")

// ReplaySpec names a live projection and how to build a copy of it.
type ReplaySpec struct {
	// Name and Topic (and Topics, see Config) of the live projection (its
	// stored offsets).
	Name   string
	Topic  string
	Topics []string
	// Tables are the live tables the projection writes, compared row for
	// row with their replay.
	Tables []string
	// Scratch are tables the handler also writes but whose live rows are
	// changed by something else as well (a queue another loop consumes, a
	// delivery schedule): they are replayed into fresh copies, so the live
	// ones are never touched, and not compared.
	Scratch []string
	// Where, if set for a table, restricts its comparison to the rows the
	// SQL condition selects, on both sides (e.g. rows a retention job has
	// not yet archived). It is written by the program, never by a user.
	Where map[string]string
	// NewHandler returns a handler that writes to the given tables instead
	// of the live ones (live name → replay name, for Tables and Scratch).
	NewHandler func(tables map[string]string) Handler
	Kafka      kafka.Config
	// Suffix names the replay tables (<table><Suffix>); default "_replay".
	Suffix string
	// Keep leaves the replay tables in place after the comparison.
	Keep      bool
	BatchSize int
}

// Report is what Replay found.
type Report struct {
	Records int64 // records applied to the replay tables
	// Skipped are records that failed alone and were left out, as the
	// live runner parked them.
	Skipped  int64
	Tables   []TableReport
	Duration time.Duration
}

// Equal reports whether every replay table equals its live table.
func (r *Report) Equal() bool {
	for _, t := range r.Tables {
		if t.OnlyInLive != 0 || t.OnlyInReplay != 0 {
			return false
		}
	}
	return true
}

// TableReport compares one live table with its replay.
type TableReport struct {
	Live, Replay             string
	LiveRows, ReplayRows     int64
	OnlyInLive, OnlyInReplay int64
	// Samples are up to five differing rows as JSON, prefixed "live: " or
	// "replay: ".
	Samples []string
}

// Replay rebuilds a projection from offset 0 into fresh tables and compares
// them, row for row, with the live tables at the same offsets.
//
// The comparison must see both sides at the same point of the log while the
// live runner keeps going. So Replay first catches up with the live offsets,
// then, in a transaction that locks the live projection's offset rows (the
// live runner blocks at its next commit), replays whatever the live side
// applied meanwhile and compares. The live runner is paused only for that
// last step.
func Replay(ctx context.Context, pool *pgxpool.Pool, spec ReplaySpec) (*Report, error) {
	began := time.Now()
	if spec.Suffix == "" {
		spec.Suffix = "_replay"
	}
	if spec.BatchSize <= 0 {
		spec.BatchSize = 1000
	}
	// Fresh tables every time: replay tables left by an earlier run (Keep)
	// would hold rows the handler then skips as already applied, hiding
	// exactly the differences the replay looks for.
	mapping := make(map[string]string, len(spec.Tables)+len(spec.Scratch))
	for _, t := range append(append([]string(nil), spec.Tables...), spec.Scratch...) {
		mapping[t] = t + spec.Suffix
		if err := freshCopy(ctx, pool, t, mapping[t]); err != nil {
			return nil, err
		}
	}
	// The topics' ends only tell whether there is anything to compare; the
	// targets are the live projection's offsets, which may trail them.
	topics := withTopics(spec.Topic, spec.Topics)
	partitions := make(map[string]int32, len(topics))
	live := map[topicPartition]int64{}
	written := false // some topic has records
	for _, t := range topics {
		n, ends, err := endOffsets(ctx, spec.Kafka, t)
		if err != nil {
			return nil, err
		}
		partitions[t] = n
		written = written || anyPositive(ends)
		stored, err := loadOffsets(ctx, pool, spec.Name, t)
		if err != nil {
			return nil, err
		}
		for p, o := range stored {
			live[topicPartition{t, p}] = o
		}
	}
	if len(live) == 0 && written {
		return nil, fmt.Errorf("projection %s %w: there is no live state to compare", spec.Name, ErrNothingApplied)
	}
	// From offset 0 of every partition (no stored offsets; the log start
	// after retention): the replay is a rebuild from the whole retained
	// log.
	cl, err := consumer(spec.Kafka, partitions, nil, kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	rp := &replayer{cl: cl, handler: spec.NewHandler(mapping), pool: pool, batch: spec.BatchSize, pos: map[topicPartition]int64{}}

	// Catch up with the live side without blocking it; what it applies
	// meanwhile is replayed under the lock below, which is short because it
	// is only the difference.
	if err := rp.until(ctx, live); err != nil {
		return nil, err
	}
	report := &Report{}
	err = pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT topic, partition, next_offset FROM projection_offsets
			WHERE projection = $1 AND topic = ANY($2) FOR UPDATE`, spec.Name, topics)
		if err != nil {
			return fmt.Errorf("lock live offsets: %w", err)
		}
		now := map[topicPartition]int64{}
		var (
			t string
			p int32
			o int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&t, &p, &o}, func() error { now[topicPartition{t, p}] = o; return nil }); err != nil {
			return fmt.Errorf("lock live offsets: %w", err)
		}
		// Row locks on the live offsets make the live runner wait at its
		// next commit, so both sides stand at the same offsets while they
		// are compared. Replay writes through other connections, whose
		// commits the comparison's statements see (read committed).
		if len(now) > 0 {
			if err := rp.until(ctx, now); err != nil {
				return err
			}
		}
		for _, t := range spec.Tables {
			tr, err := compare(ctx, tx, t, mapping[t], spec.Where[t])
			if err != nil {
				return err
			}
			report.Tables = append(report.Tables, tr)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !spec.Keep {
		for _, t := range append(append([]string(nil), spec.Tables...), spec.Scratch...) {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{mapping[t]}.Sanitize()); err != nil {
				return nil, fmt.Errorf("drop %s: %w", mapping[t], err)
			}
		}
	}
	report.Records = rp.applied
	report.Skipped = rp.skipped
	report.Duration = time.Since(began)
	return report, nil
}

func freshCopy(ctx context.Context, pool *pgxpool.Pool, live, replay string) error {
	l, r := pgx.Identifier{live}.Sanitize(), pgx.Identifier{replay}.Sanitize()
	_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+r+`; CREATE TABLE `+r+` (LIKE `+l+` INCLUDING ALL)`)
	if err != nil {
		return fmt.Errorf("create replay table %s: %w", replay, err)
	}
	return nil
}

// endOffsets returns the topic's partition count and read-committed end
// offsets.
func endOffsets(ctx context.Context, cfg kafka.Config, topic string) (int32, map[int32]int64, error) {
	opts, err := cfg.Opts()
	if err != nil {
		return 0, nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, nil, err
	}
	defer cl.Close()
	partitions, err := kafka.Partitions(ctx, cl, topic)
	if err != nil {
		return 0, nil, err
	}
	listed, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return partitions, ends, nil
}

func anyPositive(m map[int32]int64) bool {
	for _, v := range m {
		if v > 0 {
			return true
		}
	}
	return false
}

// replayer applies records to the replay tables up to given offsets,
// holding back records past them for a later call. Targets are the live
// runner's stored offsets, which are always one past a data record, so each
// target is reached by a record the consumer returns.
type replayer struct {
	cl      *kgo.Client
	handler Handler
	pool    *pgxpool.Pool
	batch   int
	pos     map[topicPartition]int64 // next offset applied per partition
	held    []*kgo.Record
	applied int64
	skipped int64 // records that failed alone (dead letters of the live side)
}

func (rp *replayer) until(ctx context.Context, target map[topicPartition]int64) error {
	done := func() bool {
		for p, o := range target {
			if rp.pos[p] < o {
				return false
			}
		}
		return true
	}
	// Records past a target are held, not applied: a handler batch must stop
	// exactly at the live offsets so the two sides can be equal.
	for !done() {
		var batch, later []*kgo.Record
		for _, rec := range rp.held {
			if rec.Offset < target[topicPartition{rec.Topic, rec.Partition}] {
				batch = append(batch, rec)
			} else {
				later = append(later, rec)
			}
		}
		if len(batch) == 0 {
			// Poll only when nothing held is due: held records come before
			// anything the consumer returns next.
			fetches := rp.cl.PollRecords(ctx, rp.batch)
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fetchErr(fetches); err != nil {
				return err
			}
			for _, rec := range fetches.Records() {
				if rec.Offset < target[topicPartition{rec.Topic, rec.Partition}] {
					batch = append(batch, rec)
				} else {
					later = append(later, rec)
				}
			}
		}
		rp.held = later
		if len(batch) == 0 {
			continue
		}
		// No offsets are stored for the replay: it is rebuilt from 0 every
		// time, so its batches need no atomicity beyond their own rows.
		if err := rp.apply(ctx, batch); err != nil {
			return fmt.Errorf("replay apply: %w", err)
		}
		for t, offsets := range nextOffsets(batch) {
			for p, o := range offsets {
				tp := topicPartition{t, p}
				rp.pos[tp] = max(rp.pos[tp], o)
			}
		}
		rp.applied += int64(len(batch))
	}
	return nil
}

// apply applies a batch to the replay tables. A batch that fails for a
// reason of its own is applied record by record, skipping (and counting)
// the records that fail alone: the live runner parked those as dead
// letters, so the live tables hold nothing of them either.
func (rp *replayer) apply(ctx context.Context, batch []*kgo.Record) error {
	err := pg.InTx(ctx, rp.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return rp.handler.Apply(ctx, tx, batch)
	})
	if err == nil || pg.IsTransient(err) {
		return err
	}
	return pg.InTx(ctx, rp.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		skipped := int64(0)
		for _, rec := range batch {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if err := rp.handler.Apply(ctx, sp, []*kgo.Record{rec}); err != nil {
				_ = sp.Rollback(ctx)
				if pg.IsTransient(err) {
					return err
				}
				skipped++
				continue
			}
			if err := sp.Commit(ctx); err != nil {
				return err
			}
		}
		rp.skipped += skipped
		return nil
	})
}

// compare counts rows that differ between two tables of the same shape,
// among the rows where selects ("" = all).
func compare(ctx context.Context, tx pgx.Tx, live, replay, where string) (TableReport, error) {
	l, r := pgx.Identifier{live}.Sanitize(), pgx.Identifier{replay}.Sanitize()
	cond := ""
	if where != "" {
		cond = ` WHERE ` + where
	}
	// Rows compare by their text form: every column type has one (json has
	// no equality operator), and equal text is what "identical" means here.
	lt, rt := `(SELECT x::text AS row FROM `+l+` x`+cond+`)`, `(SELECT x::text AS row FROM `+r+` x`+cond+`)`
	// EXCEPT ALL, not EXCEPT: rows count with their multiplicity, so a row
	// held twice on one side (a table without a unique key) is a difference
	// too.
	tr := TableReport{Live: live, Replay: replay}
	err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+l+` x`+cond+`), (SELECT count(*) FROM `+r+` x`+cond+`),
		(SELECT count(*) FROM (`+lt+` EXCEPT ALL `+rt+`) d),
		(SELECT count(*) FROM (`+rt+` EXCEPT ALL `+lt+`) d)`).
		Scan(&tr.LiveRows, &tr.ReplayRows, &tr.OnlyInLive, &tr.OnlyInReplay)
	if err != nil {
		return tr, fmt.Errorf("compare %s with %s: %w", live, replay, err)
	}
	if tr.OnlyInLive+tr.OnlyInReplay == 0 {
		return tr, nil
	}
	rows, err := tx.Query(ctx, `
		(SELECT 'live: ' || row FROM (`+lt+` EXCEPT ALL `+rt+`) d LIMIT 5)
		UNION ALL
		(SELECT 'replay: ' || row FROM (`+rt+` EXCEPT ALL `+lt+`) d LIMIT 5)`)
	if err != nil {
		return tr, fmt.Errorf("sample differences of %s: %w", live, err)
	}
	tr.Samples, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return tr, fmt.Errorf("sample differences of %s: %w", live, err)
	}
	return tr, nil
}
