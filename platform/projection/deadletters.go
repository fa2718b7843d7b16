package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// Dead letters: a record that a projection or consumer still cannot apply
// after its bounded retries is parked in projection_dead_letters (in the
// schema of the projection's tables, migrated with Migrations) in the
// transaction that moves the consumer's offset past it, so one bad record
// never stops the records behind it. An operator lists them, asks for a
// retry once the cause is fixed (the owner of the projection applies the
// record again and removes it when that succeeds), or drops them.

// EventIDHeader is the record header that names the event a record holds
// (written by the outbox relay).
const EventIDHeader = "taskmesh-event-id"

// DeadLetter is a parked record.
type DeadLetter struct {
	ID         int64
	Projection string
	Topic      string
	Partition  int32
	Offset     int64
	// EventID is the record's taskmesh-event-id header ("" without one).
	EventID string
	Key     []byte
	Headers []kgo.RecordHeader
	Payload []byte
	// Error is why the last attempt failed, cleaned of what a text column
	// cannot hold.
	Error    string
	Attempts int
	ParkedAt time.Time
	// RetryRequestedAt is set while an operator's retry waits for the
	// owner; LastRetryAt is when a retry last failed. Zero when never.
	RetryRequestedAt, LastRetryAt time.Time
}

// Record rebuilds the Kafka record the dead letter holds.
func (d DeadLetter) Record() *kgo.Record {
	return &kgo.Record{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Key: d.Key, Value: d.Payload,
		Headers: d.Headers}
}

// ErrNoDeadLetter is returned for a dead letter id that does not exist
// (never did, or was retried successfully or dropped).
var ErrNoDeadLetter = errors.New("no such dead letter")

// HeaderValue returns the value of a record's header key ("" if absent).
func HeaderValue(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Park records rec as a dead letter of projection in tx, after attempts
// failed attempts ending with cause. Parking the same record again (a
// redelivery after a crash) updates the row instead of adding one.
func Park(ctx context.Context, tx pgx.Tx, projection string, rec *kgo.Record, cause error, attempts int) (DeadLetter, error) {
	d := DeadLetter{Projection: projection, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset,
		EventID: pg.CleanText(HeaderValue(rec, EventIDHeader)), Key: rec.Key, Headers: rec.Headers, Payload: rec.Value,
		Error: pg.CleanText(cause.Error()), Attempts: attempts}
	keys, values := make([]string, len(rec.Headers)), make([][]byte, len(rec.Headers))
	for i, h := range rec.Headers {
		keys[i], values[i] = pg.CleanText(h.Key), h.Value
	}
	payload := rec.Value
	if payload == nil {
		payload = []byte{}
	}
	err := tx.QueryRow(ctx, `
		INSERT INTO projection_dead_letters (projection, topic, partition, record_offset, event_id, record_key,
			header_keys, header_values, payload, error, attempts)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (projection, topic, partition, record_offset) DO UPDATE SET error = EXCLUDED.error,
			attempts = projection_dead_letters.attempts + EXCLUDED.attempts
		RETURNING id, parked_at, attempts`,
		projection, rec.Topic, rec.Partition, rec.Offset, d.EventID, rec.Key, keys, values, payload, d.Error, attempts).
		Scan(&d.ID, &d.ParkedAt, &d.Attempts)
	if err != nil {
		return d, fmt.Errorf("park %s record %d/%d: %w", projection, rec.Partition, rec.Offset, err)
	}
	return d, nil
}

// ReportParked logs a parked record and counts it in the
// taskmesh.projection.dead_letters metric; hook, if set, is called too.
func ReportParked(log *slog.Logger, hook func(DeadLetter), d DeadLetter) {
	log.Error("record parked as a dead letter", "projection", d.Projection, "topic", d.Topic, "partition", d.Partition,
		"offset", d.Offset, "event_id", d.EventID, "dead_letter_id", d.ID, "attempts", d.Attempts, "err", d.Error)
	deadLetterCounter().Add(context.Background(), 1, deadLetterAttrs(d.Projection, d.Topic))
	if hook != nil {
		hook(d)
	}
}

// DeadLetterFilter selects dead letters: Projection ("" = every one), ids
// above AfterID (paging), at most Limit (default 100).
type DeadLetterFilter struct {
	Projection string
	AfterID    int64
	Limit      int
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const deadLetterColumns = `id, projection, topic, partition, record_offset, event_id, record_key, header_keys,
	header_values, payload, error, attempts, parked_at, retry_requested_at, last_retry_at`

func scanDeadLetters(rows pgx.Rows) ([]DeadLetter, error) {
	var out []DeadLetter
	for rows.Next() {
		var (
			d                  DeadLetter
			keys               []string
			values             [][]byte
			requested, retried *time.Time
		)
		if err := rows.Scan(&d.ID, &d.Projection, &d.Topic, &d.Partition, &d.Offset, &d.EventID, &d.Key, &keys, &values,
			&d.Payload, &d.Error, &d.Attempts, &d.ParkedAt, &requested, &retried); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		for i := range keys {
			d.Headers = append(d.Headers, kgo.RecordHeader{Key: keys[i], Value: values[i]})
		}
		if requested != nil {
			d.RetryRequestedAt = *requested
		}
		if retried != nil {
			d.LastRetryAt = *retried
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	return out, nil
}

// ListDeadLetters returns the dead letters f selects, oldest first.
func ListDeadLetters(ctx context.Context, q querier, f DeadLetterFilter) ([]DeadLetter, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := q.Query(ctx, `SELECT `+deadLetterColumns+` FROM projection_dead_letters
		WHERE ($1 = '' OR projection = $1) AND id > $2 ORDER BY id LIMIT $3`, f.Projection, f.AfterID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return scanDeadLetters(rows)
}

// GetDeadLetter returns one dead letter, or ErrNoDeadLetter.
func GetDeadLetter(ctx context.Context, q querier, id int64) (DeadLetter, error) {
	rows, err := q.Query(ctx, `SELECT `+deadLetterColumns+` FROM projection_dead_letters WHERE id = $1`, id)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	ds, err := scanDeadLetters(rows)
	if err != nil {
		return DeadLetter{}, err
	}
	if len(ds) == 0 {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrNoDeadLetter)
	}
	return ds[0], nil
}

// RequestRetry asks the owner of the dead letter's projection to apply it
// again (within RetryPoll of its runner); it returns the moment of the
// request, which RetryOutcome compares with, or ErrNoDeadLetter.
func RequestRetry(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, id int64) (time.Time, error) {
	var at time.Time
	err := db.QueryRow(ctx, `UPDATE projection_dead_letters SET retry_requested_at = clock_timestamp()
		WHERE id = $1 RETURNING retry_requested_at`, id).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, fmt.Errorf("dead letter %d: %w", id, ErrNoDeadLetter)
	}
	if err != nil {
		return at, fmt.Errorf("request a retry of dead letter %d: %w", id, err)
	}
	return at, nil
}

// RetryOutcome reports what became of a retry requested at requested:
// done once the owner tried it; applied when it succeeded (the dead letter
// is gone), else d is the dead letter with the new error.
func RetryOutcome(ctx context.Context, q querier, id int64, requested time.Time) (done, applied bool, d DeadLetter, err error) {
	d, err = GetDeadLetter(ctx, q, id)
	if errors.Is(err, ErrNoDeadLetter) {
		return true, true, d, nil
	}
	if err != nil {
		return false, false, d, err
	}
	return d.RetryRequestedAt.IsZero() && !d.LastRetryAt.Before(requested), false, d, nil
}

// DropDeadLetter removes a dead letter for good, or returns ErrNoDeadLetter.
func DropDeadLetter(ctx context.Context, db execer, id int64) error {
	tag, err := db.Exec(ctx, `DELETE FROM projection_dead_letters WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("drop dead letter %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("dead letter %d: %w", id, ErrNoDeadLetter)
	}
	return nil
}

// RetryFunc applies one dead letter's record again inside tx (a savepoint
// of the retry's transaction).
type RetryFunc func(ctx context.Context, tx pgx.Tx, d DeadLetter) error

// RetryRequested applies, for projection, every dead letter whose retry
// was requested: a record that applies now is removed in the same
// transaction; one that fails again keeps its place with the new error and
// its request cleared. A transient failure (the database, not the record)
// is returned and the requests stay for the next call. db must be the
// connection of the projection's single writer.
func RetryRequested(ctx context.Context, db interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, projection string, apply RetryFunc, log *slog.Logger) (retried int, err error) {
	rows, err := db.Query(ctx, `SELECT `+deadLetterColumns+` FROM projection_dead_letters
		WHERE projection = $1 AND retry_requested_at IS NOT NULL ORDER BY id`, projection)
	if err != nil {
		return 0, fmt.Errorf("dead letters to retry: %w", err)
	}
	pending, err := scanDeadLetters(rows)
	if err != nil {
		return 0, err
	}
	for _, d := range pending {
		err := pg.InTx(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			applyErr := apply(ctx, sp, d)
			if applyErr == nil {
				if err := sp.Commit(ctx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `DELETE FROM projection_dead_letters WHERE id = $1`, d.ID)
				log.Info("dead letter applied on retry", "projection", projection, "dead_letter_id", d.ID,
					"partition", d.Partition, "offset", d.Offset, "event_id", d.EventID)
				return err
			}
			_ = sp.Rollback(ctx)
			if pg.IsTransient(applyErr) {
				return applyErr
			}
			log.Warn("dead letter failed again on retry", "projection", projection, "dead_letter_id", d.ID, "err", applyErr)
			_, err = tx.Exec(ctx, `UPDATE projection_dead_letters SET error = $2, attempts = attempts + 1,
				retry_requested_at = NULL, last_retry_at = clock_timestamp() WHERE id = $1`, d.ID, pg.CleanText(applyErr.Error()))
			return err
		})
		if err != nil {
			return retried, fmt.Errorf("retry dead letter %d: %w", d.ID, err)
		}
		retried++
	}
	return retried, nil
}
