package kueue

import (
	"errors"
	"testing"
	"time"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/domain/quantity"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/admitcore"
)

func gpuQueue(cohort, nominal string, borrowing *string) *quotav1.ClusterQueueSpec {
	return &quotav1.ClusterQueueSpec{Cohort: cohort, ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{"nvidia.com/gpu"},
		Flavors: []*quotav1.FlavorQuotas{{Name: "a100", Resources: []*quotav1.ResourceQuota{{Name: "nvidia.com/gpu",
			NominalQuota: nominal, BorrowingLimit: borrowing}}}}}},
		Preemption: &quotav1.ClusterQueuePreemption{WithinClusterQueue: "LowerPriority", MinPriorityGap: 3}}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		defs    app.Definitions
		wantErr error
	}{
		{"valid", app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"q": gpuQueue("c", "8", new("2"))},
			Cohorts: map[string]*quotav1.CohortSpec{"c": {}}}, nil},
		{"bad nominal", app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"q": gpuQueue("", "eight", nil)}}, quantity.ErrInvalid},
		{"bad borrowing limit", app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"q": gpuQueue("c", "8", new("x"))},
			Cohorts: map[string]*quotav1.CohortSpec{"c": {}}}, quantity.ErrInvalid},
		// As in Kueue, a cohort named by a queue needs no object of its own.
		{"implicit cohort", app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"q": gpuQueue("c", "8", new("2"))}}, nil},
		{"cohort cycle", app.Definitions{Cohorts: map[string]*quotav1.CohortSpec{"a": {Parent: "b"}, "b": {Parent: "a"}}}, admitcore.ErrCohortCycle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.defs)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			var ce *admitcore.ConfigError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &ce) || ce.Name == "" {
				t.Fatalf("Validate = %v, want a ConfigError naming the object, wrapping %v", err, tt.wantErr)
			}
		})
	}
}

func TestCoreRoundTrip(t *testing.T) {
	c, err := New(app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"q": gpuQueue("", "2", nil)}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"low", "high"} {
		if err := c.Enqueue(app.Workload{ID: id, ClusterQueue: "q", Priority: 1 + 8*i, Created: t0, Requests: map[string]int64{"nvidia.com/gpu": 2000}}); err != nil {
			t.Fatal(err)
		}
	}
	ds := c.Schedule(t0, 10)
	if len(ds) != 1 || ds[0].Kind != app.DecisionAdmit || ds[0].Workload != "high" || ds[0].Flavors["nvidia.com/gpu"] != "a100" {
		t.Fatalf("decisions = %+v", ds)
	}
	if err := c.Admit("high", ds[0].Flavors); err != nil {
		t.Fatal(err)
	}
	u, err := c.ClusterQueueUsage("q")
	if err != nil || len(u) != 1 || u[0].Name != "a100" || u[0].Resources[0].Total != "2" || u[0].Resources[0].Available != "0" {
		t.Fatalf("usage = %v, %v", u, err)
	}
	ex, err := c.Explain("low")
	if err != nil || ex.State != app.StatePending || ex.Position != 1 || len(ex.Shortages) != 1 || ex.Shortages[0].Requested != "2" {
		t.Fatalf("explain low = %+v, %v", ex, err)
	}
	// The sentence says what the fields say: the same 1-based position, the
	// same quantities (docs/api/quota.md#explaining-a-wait).
	if want := "position 1 in q: a100/nvidia.com/gpu: requested 2, available 0 (nominal 2, borrowable 0)"; ex.Reason != want {
		t.Fatalf("explain low's reason = %q, want %q", ex.Reason, want)
	}
	// A lower-priority workload never preempts (gap 3, and it is lower).
	if ds := c.Schedule(t0, 10); len(ds) != 0 {
		t.Fatalf("decisions = %+v", ds)
	}
	if err := c.Remove("high"); err != nil {
		t.Fatal(err)
	}
	if ds := c.Schedule(t0, 10); len(ds) != 1 || ds[0].Workload != "low" {
		t.Fatalf("after release: %+v", ds)
	}
	if _, err := c.Explain("nope"); !errors.Is(err, admitcore.ErrUnknownWorkload) {
		t.Fatalf("explain unknown = %v", err)
	}
}

func TestPreemptionDecision(t *testing.T) {
	c, err := New(app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"q": gpuQueue("", "1", nil)}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gpu := map[string]int64{"nvidia.com/gpu": 1000}
	if err := c.Enqueue(app.Workload{ID: "victim", ClusterQueue: "q", Priority: 2, Created: t0, Requests: gpu}); err != nil {
		t.Fatal(err)
	}
	if err := c.Admit("victim", map[string]string{"nvidia.com/gpu": "a100"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Enqueue(app.Workload{ID: "urgent", ClusterQueue: "q", Priority: 9, Created: t0, Requests: gpu}); err != nil {
		t.Fatal(err)
	}
	ds := c.Schedule(t0, 10)
	if len(ds) != 1 || ds[0].Kind != app.DecisionPreempt || ds[0].Victim != "victim" || ds[0].Workload != "urgent" || ds[0].Reason == "" {
		t.Fatalf("decisions = %+v", ds)
	}
	if err := c.Preempt("victim", "urgent"); err != nil {
		t.Fatal(err)
	}
	if ex, err := c.Explain("victim"); err != nil || ex.State != app.StateEvicting {
		t.Fatalf("victim = %+v, %v", ex, err)
	}
}
