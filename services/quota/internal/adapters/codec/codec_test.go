package codec

import (
	"reflect"
	"testing"
	"time"

	domain "github.com/taskmesh/taskmesh/services/quota/internal/domain/quota"
)

// Every event survives Marshal → Unmarshal unchanged: what rebuilds the
// inline projection from the log.
func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 5, 0, 0, 123000, time.UTC)
	events := []any{
		domain.TenantCreated{Name: "Acme"}, domain.TenantRenamed{Name: "ACME"},
		domain.ClusterCreated{Name: "c1", Description: "d"}, domain.InventorySet{MachineType: "A100", Total: 8},
		domain.InventoryReserved{MachineType: "A100", GPUs: 4, QuotaID: "q"}, domain.InventoryReleased{MachineType: "A100", GPUs: 4, QuotaID: "q"},
		domain.QuotaCreated{ID: "q", Name: "n", Kind: domain.KindGU, Cluster: "c1", Level: 2, ParentID: "p", RootID: "p",
			Background: true, MachineType: "A100", Min: 1, Max: 2, Provisioning: true},
		domain.QuotaUpdated{Min: 1, Max: 3}, domain.QuotaUnsubscribed{Reason: "r"}, domain.QuotaDeleted{},
		domain.QuotaProduced{WorkGroups: []domain.ProducedWorkGroup{{QuotaID: "q", QuotaName: "n", WorkGroupID: "wg-q", MachineType: "A100", GPUs: 1}}},
		domain.QuotaProductionFailed{Reason: "r"},
		domain.RayClusterProvisioning{Cluster: "c1", RayName: "ray", CUQuotaID: "cu", CUQuotaName: "cun"},
		domain.RayClusterApplied{}, domain.RayClusterRunning{Endpoint: "ray://x"}, domain.RayClusterFailed{Reason: "r"},
		domain.WorkGroupProvisioning{WorkGroupID: "wg-q", QuotaID: "q", QuotaName: "n", RayCluster: "ray", Cluster: "c1", MachineType: "A100", GPUs: 2},
		domain.WorkGroupApplied{Generation: 2}, domain.WorkGroupSpecChanged{Generation: 2, GPUs: 3}, domain.WorkGroupRunning{GPUs: 3},
		domain.WorkGroupFailed{Reason: "r"}, domain.WorkGroupDeleting{}, domain.WorkGroupDeleted{},
	}
	for _, data := range events {
		in := domain.Event{Aggregate: "quota/q", Version: 7, TenantID: "acme", At: at, Data: data}
		payload, typ, err := Marshal("7f1f7c4e-8c1e-4a39-9d0e-1d1a2b3c4d5e", "admin", in, nil)
		if err != nil {
			t.Fatalf("%T: %v", data, err)
		}
		if want := reflect.TypeOf(data).Name(); typ != want {
			t.Errorf("type name %q, want %q", typ, want)
		}
		out, ok, err := Unmarshal(payload)
		if err != nil || !ok || !reflect.DeepEqual(out, in) {
			t.Errorf("%T: round trip = %+v (%v, %v), want %+v", data, out, ok, err, in)
		}
	}
	if _, _, err := Marshal("x", "", domain.Event{Data: struct{}{}}, nil); err == nil {
		t.Error("an unknown event was encoded")
	}
	if _, _, err := Unmarshal([]byte{0xff, 0xff}); err == nil {
		t.Error("garbage decoded")
	}
	if AggregateType("ray/acme/c1") != "ray" {
		t.Error("aggregate type")
	}
}
