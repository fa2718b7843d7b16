// Package eventstore keeps a service's events in Postgres: the source of
// truth from which every other state is derived.
//
// Events are appended inside the caller's transaction, so a command's events
// and its inline projection (the state the service decides from, such as the
// scheduler's tasks table) commit or roll back together. Concurrency is
// optimistic: (aggregate_id, version) is unique, so when two writers both
// append version N of an aggregate exactly one commits and the other gets a
// *ConflictError (errors.Is(err, ErrConflict)) and must reload and decide
// again.
//
// The events table doubles as the transactional outbox; package outbox
// publishes it to Kafka.
package eventstore

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskmesh/taskmesh/platform/pg"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the event store's schema (events and outbox
// checkpoints), to be applied with pg.Migrate in the owning service's schema.
func Migrations() pg.MigrationSet {
	set, err := pg.LoadMigrations("eventstore", migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time; a bad name is a programming error
	}
	return set
}

// Event is one recorded fact about an aggregate.
type Event struct {
	// Position in the events table, assigned on append (0 before).
	ID            int64
	AggregateType string
	AggregateID   string
	// Version is 1 for an aggregate's first event and grows by one.
	Version  int64
	Type     string
	EventID  string // a UUID
	TenantID string
	// OccurredAt is decided by the domain (injected clock), not the database.
	OccurredAt time.Time
	// Payload is the serialized topic envelope, published to Kafka as is.
	Payload []byte
	// Headers travel with the event to Kafka record headers (trace context).
	Headers map[string]string
}

// MaxPayload is the largest payload Append accepts: below Kafka's default
// 1 MiB message limit, so the relay can always publish what was stored.
const MaxPayload = 900 << 10

// ErrConflict is matched (errors.Is) by every *ConflictError.
var ErrConflict = errors.New("eventstore: version conflict")

// ErrInvalid is returned for a batch that cannot be appended as given
// (missing fields, versions not consecutive).
var ErrInvalid = errors.New("eventstore: invalid events")

// ConflictError says another writer already appended Version of AggregateID.
// The transaction it was returned in is aborted.
type ConflictError struct {
	AggregateID string
	Version     int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventstore: version conflict on %s (version %d already exists)", e.AggregateID, e.Version)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Execer is what appends need: a transaction (or, in tests, anything that
// executes statements).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Store appends and loads events of the events table found on the
// connection's search_path (each service has it in its own schema).
type Store struct{}

// New returns a Store.
func New() *Store { return &Store{} }

// Append records events in tx. Events of one aggregate must be given in
// consecutive version order. A version that already exists yields a
// *ConflictError; the caller's transaction is then aborted and must be
// rolled back, so nothing of the command is stored.
//
// An event whose predecessor was appended by a transaction with a higher
// id than tx's is refused as a serialization failure
// (pg.IsSerializationFailure): the relay, which publishes in transaction
// order, would publish it before its predecessor. The command must be
// decided again in a new transaction, whose id is newer.
func (s *Store) Append(ctx context.Context, tx Execer, events ...Event) error {
	sql, args, err := s.appendStatement(events)
	if err != nil || sql == "" {
		return err
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return AppendError(err, events)
	}
	return nil
}

// QueueAppend adds the statement that appends events to b, for callers
// that pipeline a transaction's statements (pgx.Batch). When the batch is
// sent, pass the statement's error through AppendError.
func (s *Store) QueueAppend(b *pgx.Batch, events ...Event) error {
	sql, args, err := s.appendStatement(events)
	if err != nil || sql == "" {
		return err
	}
	b.Queue(sql, args...)
	return nil
}

// AppendError turns the error of an append statement into a *ConflictError
// when another writer had the version, and wraps it otherwise.
func AppendError(err error, events []Event) error {
	if err == nil {
		return nil
	}
	// Only the (aggregate_id, version) key is a conflict: a clash on
	// event_id or any other error is a bug or an outage, not a lost race,
	// and must not be retried as one.
	if pg.IsUniqueViolation(err, "events_aggregate_version_key") {
		return conflictFrom(err, events)
	}
	return fmt.Errorf("eventstore: append: %w", err)
}

// appendStatement validates events and builds one INSERT for all of them
// ("" when there are none).
func (s *Store) appendStatement(events []Event) (string, []any, error) {
	if len(events) == 0 {
		return "", nil, nil
	}
	// Checked before anything reaches the database: a malformed batch is the
	// caller's bug, reported as ErrInvalid rather than as whatever
	// constraint it would have tripped.
	if err := validate(events); err != nil {
		return "", nil, err
	}
	// Columns as arrays, one per field: a statement whose text does not
	// depend on the batch size is prepared once and reused, whatever the
	// number of events.
	n := len(events)
	var (
		types   = make([]string, n)
		aggIDs  = make([]string, n)
		vers    = make([]int64, n)
		evTypes = make([]string, n)
		evIDs   = make([]string, n)
		tenants = make([]string, n)
		times   = make([]time.Time, n)
		loads   = make([][]byte, n)
		heads   = make([][]byte, n)
	)
	// The first event of each aggregate in the batch: the one whose
	// predecessor is stored, not in the batch (validate checked that the
	// others follow it).
	var firstIDs []string
	var firstVers []int64
	seen := make(map[string]bool, n)
	for i, e := range events {
		if !seen[e.AggregateID] {
			seen[e.AggregateID] = true
			firstIDs, firstVers = append(firstIDs, e.AggregateID), append(firstVers, e.Version)
		}
		types[i], aggIDs[i], vers[i], evTypes[i] = e.AggregateType, e.AggregateID, e.Version, e.Type
		evIDs[i], tenants[i], times[i], loads[i] = e.EventID, e.TenantID, e.OccurredAt, e.Payload
		// No headers is SQL NULL rather than an empty object; scan then
		// leaves Headers nil.
		if len(e.Headers) > 0 {
			b, err := json.Marshal(e.Headers)
			if err != nil {
				return "", nil, fmt.Errorf("eventstore: encode headers: %w", err)
			}
			heads[i] = b
		}
	}
	// One statement for the whole batch; WITH ORDINALITY keeps the given
	// order, so ids (and the relay's order) follow version order. The
	// check runs once, before any row is written: when the stored
	// predecessor of an aggregate's first event here was written by a
	// newer transaction, the statement fails as a serialization failure
	// (migration 0005, events_check_order). A version that exists already
	// is left to the unique key: that is a lost race (ConflictError).
	return `
		WITH in_order AS MATERIALIZED (SELECT events_check_order($10::text[], $11::bigint[]))
		INSERT INTO events (aggregate_type, aggregate_id, version, event_type, event_id,
		                    tenant_id, occurred_at, payload, headers)
		SELECT t, a, v, et, eid, tn, oc, p, h
		FROM in_order, unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::uuid[],
		            $6::text[], $7::timestamptz[], $8::bytea[], $9::jsonb[])
		     WITH ORDINALITY AS x(t, a, v, et, eid, tn, oc, p, h, ord)
		ORDER BY ord`,
		[]any{types, aggIDs, vers, evTypes, evIDs, tenants, times, loads, heads, firstIDs, firstVers}, nil
}

// conflictFrom names the conflicting event. Postgres reports the key in the
// error detail; when it cannot be parsed the first event is named.
func conflictFrom(err error, events []Event) error {
	var pgErr *pgconn.PgError
	// Postgres names only the first key that clashed; matching the detail
	// text is brittle across versions, hence the fallback below.
	if errors.As(err, &pgErr) {
		for _, e := range events {
			if pgErr.Detail == fmt.Sprintf("Key (aggregate_id, version)=(%s, %d) already exists.", e.AggregateID, e.Version) {
				return &ConflictError{AggregateID: e.AggregateID, Version: e.Version}
			}
		}
	}
	return &ConflictError{AggregateID: events[0].AggregateID, Version: events[0].Version}
}

func validate(events []Event) error {
	last := map[string]int64{}
	for i, e := range events {
		switch {
		case e.AggregateType == "" || e.AggregateID == "" || e.Type == "":
			return fmt.Errorf("%w: event %d needs aggregate type, aggregate id and type", ErrInvalid, i)
		case e.EventID == "":
			return fmt.Errorf("%w: event %d has no event id", ErrInvalid, i)
		case e.Payload == nil:
			return fmt.Errorf("%w: event %d has no payload", ErrInvalid, i)
		case len(e.Payload) > MaxPayload:
			return fmt.Errorf("%w: event %d payload is %d bytes (at most %d)", ErrInvalid, i, len(e.Payload), MaxPayload)
		case e.OccurredAt.IsZero():
			return fmt.Errorf("%w: event %d has no occurred_at", ErrInvalid, i)
		case e.Version < 1:
			return fmt.Errorf("%w: event %d has version %d", ErrInvalid, i, e.Version)
		}
		// Gaps or repeats inside one batch would break the invariant that
		// versions count an aggregate's events. That the first one follows
		// what is stored is the caller's to ensure (it decided from that
		// state); the unique key catches a writer that raced it.
		if prev, ok := last[e.AggregateID]; ok && e.Version != prev+1 {
			return fmt.Errorf("%w: %s versions %d then %d are not consecutive", ErrInvalid, e.AggregateID, prev, e.Version)
		}
		last[e.AggregateID] = e.Version
	}
	return nil
}

const selectColumns = `id, aggregate_type, aggregate_id, version, event_type, event_id::text,
	tenant_id, occurred_at, payload, headers`

// Load returns the events of one aggregate with a version above after, in
// version order.
func (s *Store) Load(ctx context.Context, q Querier, aggregateID string, after int64) ([]Event, error) {
	// Version order, not id order: they agree for one aggregate (a later
	// version is appended by a later transaction, or later in the same
	// statement), but version is what the caller folds by.
	rows, err := q.Query(ctx, `SELECT `+selectColumns+` FROM events
		WHERE aggregate_id = $1 AND version > $2 ORDER BY version`, aggregateID, after)
	if err != nil {
		return nil, fmt.Errorf("eventstore: load %s: %w", aggregateID, err)
	}
	events, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("eventstore: load %s: %w", aggregateID, err)
	}
	return events, nil
}

// Rebuild feeds every event of aggregateType, page by page, to apply, in
// the order transactions appended them (the outbox's position order, which
// is version order within each aggregate). It is how an inline projection
// is rebuilt from the events alone: truncate the projection's tables, then
// Rebuild in the same transaction.
func (s *Store) Rebuild(ctx context.Context, tx Querier, aggregateType string, pageSize int,
	apply func(ctx context.Context, page []Event) error) error {
	if pageSize <= 0 {
		pageSize = 1000
	}
	// The cursor is a Position (tx_id as text, id), the same order the relay
	// publishes in, so a rebuilt inline projection sees the events in the
	// order consumers of the topic did.
	afterTx, afterID := "0", int64(0)
	for {
		// Pages rather than one cursor: apply writes through the same
		// connection, which cannot run a statement while rows are open.
		rows, err := tx.Query(ctx, `SELECT `+selectColumns+`, tx_id::text AS tx_text FROM events
			WHERE (tx_id, id) > ($2::text::xid8, $3::bigint) AND aggregate_type = $1
			ORDER BY events.tx_id, events.id LIMIT $4`, aggregateType, afterTx, afterID, pageSize)
		if err != nil {
			return fmt.Errorf("eventstore: rebuild %s: %w", aggregateType, err)
		}
		page, last, err := collectWithTx(rows)
		if err != nil {
			return fmt.Errorf("eventstore: rebuild %s: %w", aggregateType, err)
		}
		// Each page is a new statement, so under READ COMMITTED a page could
		// see events committed after the rebuild began; a caller that needs
		// one point in time blocks the writers first (the scheduler locks its
		// tasks table).
		if len(page) == 0 {
			return nil
		}
		if err := apply(ctx, page); err != nil {
			return err
		}
		afterTx, afterID = last, page[len(page)-1].ID
	}
}

func collect(rows pgx.Rows) ([]Event, error) {
	events, _, err := scan(rows, false)
	return events, err
}

// collectWithTx is collect for rows that end with the tx_id as text; it
// also returns the last row's tx_id.
func collectWithTx(rows pgx.Rows) ([]Event, string, error) { return scan(rows, true) }

func scan(rows pgx.Rows, withTx bool) ([]Event, string, error) {
	defer rows.Close()
	var (
		out  []Event
		last string
	)
	for rows.Next() {
		var (
			e       Event
			headers []byte
		)
		dest := []any{&e.ID, &e.AggregateType, &e.AggregateID, &e.Version, &e.Type, &e.EventID,
			&e.TenantID, &e.OccurredAt, &e.Payload, &headers}
		// tx_id is read as text because pgx has no xid8 type; only the last
		// row's is kept, as the next page's cursor.
		if withTx {
			dest = append(dest, &last)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, "", err
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &e.Headers); err != nil {
				return nil, "", fmt.Errorf("decode headers of event %d: %w", e.ID, err)
			}
		}
		out = append(out, e)
	}
	return out, last, rows.Err()
}
