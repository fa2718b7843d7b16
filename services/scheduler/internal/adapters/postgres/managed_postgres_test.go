package postgres_test

import (
	"context"
	"reflect"
	"testing"
	"time"

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
	if len(byID) != 4 {
		t.Fatalf("events of %d services, want the contract's 4", len(byID))
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

// A report counts only for a service the reporting agent must run, the
// ones its sync answer lists: a stray report (a shared-pool agent the
// service is not pinned to, an agent of the tenant without its labels,
// another tenant's agent) records nothing, is no heartbeat and leaves the
// service's state as it was (docs/api/services.md#taskmeshmanagedv1serviceagentservice).
func TestPostgresSyncIgnoresReportsOfServicesNotTargetingTheAgent(t *testing.T) {
	db := pgtest.New(t).Open(t, scheduler.Schema)
	ctx := context.Background()
	now := apptest.T0
	a := app.New(&postgres.ManagedStore{DB: db}, func() time.Time { return now }, app.Config{}, nil)
	owner := app.Caller{Tenant: "t1", Subject: "key-t1"}
	pinned, err := a.Create(ctx, owner, domain.Spec{Name: "hb", Command: "sleep", AgentID: "a20"})
	if err != nil {
		t.Fatal(err)
	}
	labelled, err := a.Create(ctx, owner, domain.Spec{Name: "exporter", Command: "sleep", Labels: []string{"gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	report := func(id, state string) app.Report {
		return app.Report{ServiceID: id, Instance: domain.Instance{State: state, PID: 9, Version: "1", Error: "killed by SIGKILL"}}
	}
	stray := report(pinned.ID, domain.StateStopped)
	strayLabelled := report(labelled.ID, domain.StateExited)
	sync := func(c app.Caller, labels []string, reps ...app.Report) []string {
		t.Helper()
		now = now.Add(time.Second)
		got, err := a.Sync(ctx, c, c.AgentID, labels, reps)
		if err != nil {
			t.Fatalf("sync as %s: %v", c.AgentID, err)
		}
		ids := make([]string, len(got))
		for i, sv := range got {
			ids[i] = sv.ID
		}
		return ids
	}

	pool := app.Caller{Tenant: "*", Subject: "agent:pool-1", AgentID: "pool-1"}
	if got := sync(pool, nil, stray, strayLabelled); len(got) != 0 {
		t.Fatalf("the pool agent's answer = %v, want nothing", got)
	}
	sameTenant := app.Caller{Tenant: "t1", Subject: "agent:t1-cpu", AgentID: "t1-cpu"}
	if got := sync(sameTenant, []string{"cpu"}, stray, strayLabelled); len(got) != 0 {
		t.Fatalf("the unlabelled agent's answer = %v, want nothing", got)
	}
	otherTenant := app.Caller{Tenant: "t2", Subject: "agent:t2-gpu", AgentID: "t2-gpu"}
	if got := sync(otherTenant, []string{"gpu"}, stray, strayLabelled); len(got) != 0 {
		t.Fatalf("another tenant's agent's answer = %v, want nothing", got)
	}
	for _, sv := range []domain.Service{pinned, labelled} {
		got, err := a.Get(ctx, owner, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if state, _, _, _ := got.Summary(); got.Version != 1 || len(got.Instances) != 0 || state != domain.StatePending {
			t.Errorf("%s after stray reports: version %d, state %s, instances %+v", sv.Spec.Name, got.Version, state, got.Instances)
		}
	}
	var events int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM events WHERE aggregate_type = $1`, postgres.ManagedAggregateType).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 2 {
		t.Errorf("%d events, want the two creations only", events)
	}
	operator := app.Caller{Tenant: "*", Subject: "op-1"}
	on, err := a.OnAgents(ctx, operator, []string{"pool-1", "t1-cpu", "t2-gpu"})
	if err != nil {
		t.Fatal(err)
	}
	for agent, svcs := range on {
		if len(svcs) != 0 {
			t.Errorf("on %s = %+v, want nothing: a stray report is no heartbeat", agent, svcs)
		}
	}
	if silent, err := a.MarkLost(ctx); err != nil || silent != 0 {
		t.Errorf("marked %d lost (%v), want none: no stray agent was seen", silent, err)
	}

	// The agents the services target: their reports count.
	a20 := app.Caller{Tenant: "*", Subject: "agent:a20", AgentID: "a20"}
	if got := sync(a20, nil, report(pinned.ID, domain.StateRunning)); len(got) != 1 || got[0] != pinned.ID {
		t.Fatalf("a20's answer = %v", got)
	}
	t1gpu := app.Caller{Tenant: "t1", Subject: "agent:t1-gpu", AgentID: "t1-gpu"}
	if got := sync(t1gpu, []string{"gpu", "cpu"}, report(labelled.ID, domain.StateRunning)); len(got) != 1 || got[0] != labelled.ID {
		t.Fatalf("t1-gpu's answer = %v", got)
	}
	for sv, agent := range map[string]string{pinned.ID: "a20", labelled.ID: "t1-gpu"} {
		got, err := a.Get(ctx, owner, sv)
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := got.Instances[agent]; !ok || len(got.Instances) != 1 || in.State != domain.StateRunning {
			t.Errorf("%s: instances %+v, want %s's only, running", got.Spec.Name, got.Instances, agent)
		}
	}
}
