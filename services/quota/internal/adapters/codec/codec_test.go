package codec

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Every event survives Marshal → Unmarshal unchanged: what rebuilds the
// inline projection from the log.
func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 5, 0, 0, 123000, time.UTC)
	events := []any{
		capacity.TenantCreated{Name: "Acme"}, capacity.TenantRenamed{Name: "ACME"},
		capacity.ClusterCreated{Name: "c1", Description: "d"}, capacity.InventorySet{MachineType: "A100", Total: 8},
		capacity.InventoryReserved{MachineType: "A100", GPUs: 4, QuotaID: "q"}, capacity.InventoryReleased{MachineType: "A100", GPUs: 4, QuotaID: "q"},
		capacity.QuotaCreated{ID: "q", Name: "n", Kind: capacity.KindGU, Cluster: "c1", Level: 2, ParentID: "p", RootID: "p",
			Background: true, MachineType: "A100", Min: 1, Max: 2, Provisioning: true},
		capacity.QuotaUpdated{Min: 1, Max: 3}, capacity.QuotaUnsubscribed{Reason: "r"}, capacity.QuotaDeleted{},
		capacity.QuotaProduced{WorkGroups: []capacity.ProducedWorkGroup{{QuotaID: "q", QuotaName: "n", WorkGroupID: "wg-q", MachineType: "A100", GPUs: 1}}},
		capacity.QuotaProductionFailed{Reason: "r"},
		capacity.RayClusterProvisioning{Cluster: "c1", RayName: "ray", CUQuotaID: "cu", CUQuotaName: "cun"},
		capacity.RayClusterApplied{}, capacity.RayClusterRunning{Endpoint: "ray://x"}, capacity.RayClusterFailed{Reason: "r"},
		capacity.WorkGroupProvisioning{WorkGroupID: "wg-q", QuotaID: "q", QuotaName: "n", RayCluster: "ray", Cluster: "c1", MachineType: "A100", GPUs: 2},
		capacity.WorkGroupApplied{Generation: 2}, capacity.WorkGroupSpecChanged{Generation: 2, GPUs: 3}, capacity.WorkGroupRunning{GPUs: 3},
		capacity.WorkGroupFailed{Reason: "r"}, capacity.WorkGroupDeleting{}, capacity.WorkGroupDeleted{},
	}
	for _, data := range events {
		in := capacity.Event{Aggregate: "quota/q", Version: 7, TenantID: "acme", At: at, Data: data}
		payload, typ, err := Marshal("7f1f7c4e-8c1e-4a39-9d0e-1d1a2b3c4d5e", "adm_ops", "192.0.2.7", in, nil)
		if err != nil {
			t.Fatalf("%T: %v", data, err)
		}
		var env quotav1.QuotaEvent
		if err := proto.Unmarshal(payload, &env); err != nil || env.GetActor() != "adm_ops" || env.GetActorIp() != "192.0.2.7" {
			t.Errorf("%T: envelope actor %q from %q (%v), want adm_ops from 192.0.2.7", data, env.GetActor(), env.GetActorIp(), err)
		}
		if want := reflect.TypeOf(data).Name(); typ != want {
			t.Errorf("type name %q, want %q", typ, want)
		}
		out, ok, err := Unmarshal(payload)
		if err != nil || !ok || !reflect.DeepEqual(out, in) {
			t.Errorf("%T: round trip = %+v (%v, %v), want %+v", data, out, ok, err, in)
		}
	}
	if _, _, err := Marshal("x", "", "", capacity.Event{Data: struct{}{}}, nil); err == nil {
		t.Error("an unknown event was encoded")
	}
	if _, _, err := Unmarshal([]byte{0xff, 0xff}); err == nil {
		t.Error("garbage decoded")
	}
	if AggregateType("ray/acme/c1") != "ray" {
		t.Error("aggregate type")
	}
}
