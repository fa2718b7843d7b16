package scheduler

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	managed "github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// rebuildManaged folds every managed-service event, compares the result
// with the live managed_services rows (as the documents the store writes)
// and with apply replaces them. The agents' last reports
// (managed_service_reports) are liveness, not events, and stay.
func rebuildManaged(ctx context.Context, tx pgx.Tx, rep *RebuildReport, apply bool) error {
	svcs := map[string]managed.Service{}
	var order []string
	err := eventstore.New().Rebuild(ctx, tx, postgres.ManagedAggregateType, 2000, func(ctx context.Context, page []eventstore.Event) error {
		for _, e := range page {
			_, r, err := codec.UnmarshalManaged(e.Payload)
			if err != nil {
				return fmt.Errorf("event %d: %w", e.ID, err)
			}
			s, seen := svcs[e.AggregateID]
			if !seen {
				order = append(order, e.AggregateID)
			}
			next, ok := managed.Apply(s, r)
			if !ok {
				return fmt.Errorf("event %d: no case for %s", e.ID, r.Event.EventName())
			}
			svcs[e.AggregateID] = next
			rep.Events++
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep.Services = len(order)
	live, err := liveServiceDocs(ctx, tx)
	if err != nil {
		return err
	}
	for _, id := range order {
		want, _ := json.Marshal(svcs[id])
		if live[id] != string(want) {
			rep.Differences = append(rep.Differences, "managed_service/"+id)
		}
		delete(live, id)
	}
	for id := range live {
		rep.Differences = append(rep.Differences, "managed_service/"+id)
	}
	if !apply {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM managed_services`); err != nil {
		return err
	}
	for _, id := range order {
		if err := postgres.WriteServiceRows(ctx, tx, svcs[id]); err != nil {
			return err
		}
	}
	return nil
}

// liveServiceDocs reads the managed_services rows as documents by id.
func liveServiceDocs(ctx context.Context, tx pgx.Tx) (map[string]string, error) {
	live := map[string]string{}
	rows, err := tx.Query(ctx, `SELECT id, doc::text FROM managed_services`)
	if err != nil {
		return nil, fmt.Errorf("live services: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, doc string
		if err := rows.Scan(&id, &doc); err != nil {
			return nil, err
		}
		live[id] = doc
	}
	return live, rows.Err()
}
