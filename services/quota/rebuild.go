package quota

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/postgres"
)

// RebuildReport says what RebuildInlineProjection found.
type RebuildReport struct {
	Aggregates, Events int
	// Differences are aggregates whose rebuilt state differs from the live
	// row (compared before the rows are replaced).
	Differences []string
}

// projectionTables are the inline projection's tables.
var projectionTables = []string{"tenants", "clusters", "quotas", "ray_clusters", "work_groups"}

// RebuildInlineProjection recomputes the quota service's state tables from
// the event store alone and reports every aggregate whose live row
// disagreed. With apply it replaces the live rows in one transaction.
func RebuildInlineProjection(ctx context.Context, pool *pgxpool.Pool, apply bool) (RebuildReport, error) {
	var rep RebuildReport
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		for _, t := range projectionTables {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+t+` IN SHARE MODE`); err != nil {
				return err
			}
		}
		states := postgres.NewStates()
		for _, typ := range codec.AggregateTypes {
			err := eventstore.New().Rebuild(ctx, tx, typ, 2000, func(ctx context.Context, page []eventstore.Event) error {
				for _, ev := range page {
					e, ok, err := codec.Unmarshal(ev.Payload)
					if err != nil {
						return fmt.Errorf("event %d: %w", ev.ID, err)
					}
					if !ok {
						continue
					}
					if err := states.Apply(e); err != nil {
						return err
					}
					rep.Events++
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		rep.Aggregates = len(states.Order())
		for _, agg := range states.Order() {
			live, err := postgres.LiveDoc(ctx, tx, agg)
			if err != nil {
				return err
			}
			want, err := json.Marshal(states.Get(agg))
			if err != nil {
				return err
			}
			if !sameJSON(live, want) {
				rep.Differences = append(rep.Differences, agg)
			}
		}
		if !apply {
			return nil
		}
		for _, t := range projectionTables {
			if _, err := tx.Exec(ctx, `DELETE FROM `+t); err != nil {
				return err
			}
		}
		return states.Store(ctx, tx)
	})
	return rep, err
}

func sameJSON(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}
