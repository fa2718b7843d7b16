package credentials

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// Aggregate types of the admin events (the events table's aggregate_type);
// the aggregate id is "<kind>/<id>" with the kind spelled as in
// docs/events.md#admin-events.
const (
	AggregateTenant   = "tenant"
	AggregateAPIKey   = "api_key"
	AggregateAdminKey = "admin_key"
	AggregateAgent    = "agent"
)

// aggregatePrefix is the aggregate id's kind for each aggregate type.
var aggregatePrefix = map[string]string{
	AggregateTenant:   "tenant/",
	AggregateAPIKey:   "api-key/",
	AggregateAdminKey: "admin-key/",
	AggregateAgent:    "agent/",
}

// change is one admin change to record: what changed (Event set to its
// case), which aggregate, whose tenant, by whom.
type change struct {
	aggType, id, tenant string
	by                  Actor
	event               *adminv1.AdminEvent
}

// events appends the gateway's admin events.
var events = eventstore.New()

// inCommand runs fn, a command changing the aggregate of aggType and id,
// in a transaction that holds the aggregate's lock from its start.
//
// Writers of one aggregate take turns, so each appends the version after
// the last committed one; two changes of different aggregates never wait
// for each other. The lock comes before the command's first write because
// Postgres gives a transaction its id at its first write (an UPDATE takes
// it before it waits for the row), and the event store refuses an event
// whose predecessor a newer transaction wrote
// (docs/decisions/0122-a-command-locks-its-aggregate-before-it-writes.md):
// a command that waited for the lock gets its id after the one it waited
// for has committed. A refused append or a deadlock still runs fn again
// in a new transaction (pg.InTxRetried), so fn must act on tx alone.
func (s *Store) inCommand(ctx context.Context, aggType, id string, fn func(pgx.Tx) error) error {
	return pg.InTxRetried(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := lockAggregate(ctx, tx, aggregatePrefix[aggType]+id); err != nil {
			return err
		}
		return fn(tx)
	})
}

// lockAggregate takes the transaction-level lock of the admin aggregate
// agg ("<kind>/<id>").
func lockAggregate(ctx context.Context, tx pgx.Tx, agg string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "admin-event:"+agg)
	return err
}

// record appends c to the events table in tx, the transaction of the
// change itself: the change and its event commit or roll back together,
// and the outbox relay publishes the event once committed. The envelope
// carries ids, names and prefixes, never a secret or its hash.
func (s *Store) record(ctx context.Context, tx pgx.Tx, c change) error {
	agg := aggregatePrefix[c.aggType] + c.id
	by := c.by
	if by.ID == "" {
		by = System
	}
	// The command took the lock before its first write (inCommand); a
	// change to a new aggregate takes it here. Taking it twice is a no-op.
	if err := lockAggregate(ctx, tx, agg); err != nil {
		return fmt.Errorf("record admin event of %s: %w", agg, err)
	}
	var last int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM events WHERE aggregate_id = $1`, agg).Scan(&last); err != nil {
		return fmt.Errorf("record admin event of %s: %w", agg, err)
	}
	at := pgTime(s.now())
	ev := c.event
	ev.EventId, ev.AggregateId, ev.Version, ev.OccurredAt = uuid.NewString(), agg, last+1, timestamppb.New(at)
	ev.TenantId, ev.TraceContext, ev.Actor, ev.ActorIp = c.tenant, otel.Inject(ctx), by.ID, by.IP
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return fmt.Errorf("record admin event of %s: no event set", agg)
	}
	payload, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("record admin event of %s: %w", agg, err)
	}
	return events.Append(ctx, tx, eventstore.Event{AggregateType: c.aggType, AggregateID: agg, Version: ev.Version,
		Type: string(fd.Message().Name()), EventID: ev.EventId, TenantID: c.tenant, OccurredAt: at, Payload: payload,
		Headers: ev.TraceContext})
}

// timestamp is t as a proto timestamp (nil for nil).
func timestamp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}
