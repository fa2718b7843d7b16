package postgres_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// The Postgres managed-service store keeps the contract the use cases are
// tested against, and its rows are the fold of its events: the events
// stored decode and fold into exactly the row (liveness aside).
func TestPostgresKeepsTheManagedServiceContract(t *testing.T) {
	db := pgtest.New(t).Open(t, scheduler.Schema)
	apptest.StoreContract(t, func(*testing.T) app.Store { return &postgres.ManagedStore{DB: db} })

	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT aggregate_id, payload FROM events WHERE aggregate_type = $1 ORDER BY aggregate_id, version`,
		postgres.ManagedAggregateType)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]domain.Record{}
	for rows.Next() {
		var id string
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		_, r, err := codec.UnmarshalManaged(payload)
		if err != nil {
			t.Fatal(err)
		}
		byID[id] = append(byID[id], r)
	}
	rows.Close()
	if len(byID) != 3 {
		t.Fatalf("events of %d services, want 3", len(byID))
	}
	for id, recs := range byID {
		var doc []byte
		if err := db.QueryRow(ctx, `SELECT doc FROM managed_services WHERE id = $1`, id).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		row, err := postgres.DecodeServiceDoc(doc)
		if err != nil {
			t.Fatal(err)
		}
		if folded := domain.Fold(recs); !reflect.DeepEqual(normalize(folded), normalize(row)) {
			t.Errorf("service %s:\n row    %+v\n folded %+v", id, row, folded)
		}
	}
}

// normalize drops what a JSON round trip changes (time zones).
func normalize(s domain.Service) domain.Service {
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	for k, in := range s.Instances {
		in.At = in.At.UTC()
		s.Instances[k] = in
	}
	return s
}
