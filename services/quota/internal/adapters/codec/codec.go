// Package codec converts quota events between the domain's Go types and
// the protobuf envelope (quotav1.QuotaEvent) that the event store keeps and
// Kafka carries. Decode(Encode(e)) == e for every event, which is what lets
// the inline projection be rebuilt from the log.
package codec

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// AggregateType is the event store's aggregate type of an aggregate id
// ("quota/q-1" → "quota").
func AggregateType(aggregate string) string {
	t, _, _ := strings.Cut(aggregate, "/")
	return t
}

// AggregateTypes are every aggregate type the quota service records.
var AggregateTypes = []string{"tenant", "cluster", "quota", "ray", "workgroup"}

// Marshal encodes a recorded event (Version set) in its envelope.
func Marshal(eventID, actor, actorIP string, e capacity.Event, trace map[string]string) ([]byte, string, error) {
	env := &quotav1.QuotaEvent{EventId: eventID, AggregateId: e.Aggregate, Version: e.Version,
		OccurredAt: timestamppb.New(e.At), TenantId: e.TenantID, TraceContext: trace, Actor: actor, ActorIp: actorIP}
	name, err := setEvent(env, e.Data)
	if err != nil {
		return nil, "", err
	}
	b, err := proto.Marshal(env)
	return b, name, err
}

func kind(k capacity.Kind) quotav1.QuotaKind {
	switch k {
	case capacity.KindCU:
		return quotav1.QuotaKind_QUOTA_KIND_CU
	case capacity.KindGU:
		return quotav1.QuotaKind_QUOTA_KIND_GU
	}
	return quotav1.QuotaKind_QUOTA_KIND_UNSPECIFIED
}

func kindFrom(k quotav1.QuotaKind) capacity.Kind {
	switch k {
	case quotav1.QuotaKind_QUOTA_KIND_CU:
		return capacity.KindCU
	case quotav1.QuotaKind_QUOTA_KIND_GU:
		return capacity.KindGU
	}
	return ""
}

// setEvent fills the envelope's oneof and returns the event type name.
func setEvent(env *quotav1.QuotaEvent, data any) (string, error) {
	switch d := data.(type) {
	case capacity.TenantCreated:
		env.Event = &quotav1.QuotaEvent_TenantCreated{TenantCreated: &quotav1.TenantCreated{Name: d.Name}}
	case capacity.TenantRenamed:
		env.Event = &quotav1.QuotaEvent_TenantRenamed{TenantRenamed: &quotav1.TenantRenamed{Name: d.Name}}
	case capacity.ClusterCreated:
		env.Event = &quotav1.QuotaEvent_ClusterCreated{ClusterCreated: &quotav1.ClusterCreated{Name: d.Name, Description: d.Description}}
	case capacity.InventorySet:
		env.Event = &quotav1.QuotaEvent_InventorySet{InventorySet: &quotav1.InventorySet{MachineType: d.MachineType, TotalGpus: d.Total}}
	case capacity.InventoryReserved:
		env.Event = &quotav1.QuotaEvent_InventoryReserved{InventoryReserved: &quotav1.InventoryReserved{MachineType: d.MachineType, Gpus: d.GPUs, QuotaId: d.QuotaID}}
	case capacity.InventoryReleased:
		env.Event = &quotav1.QuotaEvent_InventoryReleased{InventoryReleased: &quotav1.InventoryReleased{MachineType: d.MachineType, Gpus: d.GPUs, QuotaId: d.QuotaID}}
	case capacity.QuotaCreated:
		env.Event = &quotav1.QuotaEvent_QuotaCreated{QuotaCreated: &quotav1.QuotaCreated{QuotaId: d.ID, Name: d.Name, Kind: kind(d.Kind),
			Cluster: d.Cluster, Level: int32(d.Level), ParentId: d.ParentID, Background: d.Background, MachineType: d.MachineType,
			MinUnits: d.Min, MaxUnits: d.Max, RootId: d.RootID, Provisioning: d.Provisioning}}
	case capacity.QuotaUpdated:
		env.Event = &quotav1.QuotaEvent_QuotaUpdated{QuotaUpdated: &quotav1.QuotaUpdated{MinUnits: d.Min, MaxUnits: d.Max}}
	case capacity.QuotaUnsubscribed:
		env.Event = &quotav1.QuotaEvent_QuotaUnsubscribed{QuotaUnsubscribed: &quotav1.QuotaUnsubscribed{Reason: d.Reason}}
	case capacity.QuotaDeleted:
		env.Event = &quotav1.QuotaEvent_QuotaDeleted{QuotaDeleted: &quotav1.QuotaDeleted{}}
	case capacity.QuotaProduced:
		p := &quotav1.QuotaProduced{}
		for _, w := range d.WorkGroups {
			p.WorkGroups = append(p.WorkGroups, &quotav1.ProducedWorkGroup{QuotaId: w.QuotaID, QuotaName: w.QuotaName,
				WorkGroupId: w.WorkGroupID, MachineType: w.MachineType, Gpus: w.GPUs})
		}
		env.Event = &quotav1.QuotaEvent_QuotaProduced{QuotaProduced: p}
	case capacity.QuotaProductionFailed:
		env.Event = &quotav1.QuotaEvent_QuotaProductionFailed{QuotaProductionFailed: &quotav1.QuotaProductionFailed{Reason: d.Reason}}
	case capacity.RayClusterProvisioning:
		env.Event = &quotav1.QuotaEvent_RayClusterProvisioning{RayClusterProvisioning: &quotav1.RayClusterProvisioning{Cluster: d.Cluster,
			RayName: d.RayName, CuQuotaId: d.CUQuotaID, CuQuotaName: d.CUQuotaName}}
	case capacity.RayClusterApplied:
		env.Event = &quotav1.QuotaEvent_RayClusterApplied{RayClusterApplied: &quotav1.RayClusterApplied{}}
	case capacity.RayClusterRunning:
		env.Event = &quotav1.QuotaEvent_RayClusterRunning{RayClusterRunning: &quotav1.RayClusterRunning{Endpoint: d.Endpoint}}
	case capacity.RayClusterFailed:
		env.Event = &quotav1.QuotaEvent_RayClusterFailed{RayClusterFailed: &quotav1.RayClusterFailed{Reason: d.Reason}}
	case capacity.WorkGroupProvisioning:
		env.Event = &quotav1.QuotaEvent_WorkGroupProvisioning{WorkGroupProvisioning: &quotav1.WorkGroupProvisioning{WorkGroupId: d.WorkGroupID,
			QuotaId: d.QuotaID, RayClusterId: d.RayCluster, MachineType: d.MachineType, Gpus: d.GPUs, QuotaName: d.QuotaName, Cluster: d.Cluster}}
	case capacity.WorkGroupApplied:
		env.Event = &quotav1.QuotaEvent_WorkGroupApplied{WorkGroupApplied: &quotav1.WorkGroupApplied{Generation: d.Generation}}
	case capacity.WorkGroupSpecChanged:
		env.Event = &quotav1.QuotaEvent_WorkGroupSpecChanged{WorkGroupSpecChanged: &quotav1.WorkGroupSpecChanged{Generation: d.Generation, Gpus: d.GPUs}}
	case capacity.WorkGroupRunning:
		env.Event = &quotav1.QuotaEvent_WorkGroupRunning{WorkGroupRunning: &quotav1.WorkGroupRunning{Gpus: d.GPUs}}
	case capacity.WorkGroupFailed:
		env.Event = &quotav1.QuotaEvent_WorkGroupFailed{WorkGroupFailed: &quotav1.WorkGroupFailed{Reason: d.Reason}}
	case capacity.WorkGroupDeleting:
		env.Event = &quotav1.QuotaEvent_WorkGroupDeleting{WorkGroupDeleting: &quotav1.WorkGroupDeleting{}}
	case capacity.WorkGroupDeleted:
		env.Event = &quotav1.QuotaEvent_WorkGroupDeleted{WorkGroupDeleted: &quotav1.WorkGroupDeleted{}}
	default:
		return "", fmt.Errorf("codec: unknown event %T", data)
	}
	// The event type recorded is the Go type's name without its package,
	// so renaming the package changes nothing in the log.
	return reflect.TypeOf(data).Name(), nil
}

// Unmarshal decodes an envelope back into a domain event. Events of the
// admission layer (oneof numbers 50 and up) yield ok == false.
func Unmarshal(payload []byte) (capacity.Event, bool, error) {
	var env quotav1.QuotaEvent
	if err := proto.Unmarshal(payload, &env); err != nil {
		return capacity.Event{}, false, fmt.Errorf("codec: %w", err)
	}
	e := capacity.Event{Aggregate: env.GetAggregateId(), Version: env.GetVersion(), TenantID: env.GetTenantId(),
		At: env.GetOccurredAt().AsTime().In(time.UTC)}
	switch x := env.GetEvent().(type) {
	case *quotav1.QuotaEvent_TenantCreated:
		e.Data = capacity.TenantCreated{Name: x.TenantCreated.GetName()}
	case *quotav1.QuotaEvent_TenantRenamed:
		e.Data = capacity.TenantRenamed{Name: x.TenantRenamed.GetName()}
	case *quotav1.QuotaEvent_ClusterCreated:
		e.Data = capacity.ClusterCreated{Name: x.ClusterCreated.GetName(), Description: x.ClusterCreated.GetDescription()}
	case *quotav1.QuotaEvent_InventorySet:
		e.Data = capacity.InventorySet{MachineType: x.InventorySet.GetMachineType(), Total: x.InventorySet.GetTotalGpus()}
	case *quotav1.QuotaEvent_InventoryReserved:
		d := x.InventoryReserved
		e.Data = capacity.InventoryReserved{MachineType: d.GetMachineType(), GPUs: d.GetGpus(), QuotaID: d.GetQuotaId()}
	case *quotav1.QuotaEvent_InventoryReleased:
		d := x.InventoryReleased
		e.Data = capacity.InventoryReleased{MachineType: d.GetMachineType(), GPUs: d.GetGpus(), QuotaID: d.GetQuotaId()}
	case *quotav1.QuotaEvent_QuotaCreated:
		d := x.QuotaCreated
		e.Data = capacity.QuotaCreated{ID: d.GetQuotaId(), Name: d.GetName(), Kind: kindFrom(d.GetKind()), Cluster: d.GetCluster(),
			Level: int(d.GetLevel()), ParentID: d.GetParentId(), RootID: d.GetRootId(), Background: d.GetBackground(),
			MachineType: d.GetMachineType(), Min: d.GetMinUnits(), Max: d.GetMaxUnits(), Provisioning: d.GetProvisioning()}
	case *quotav1.QuotaEvent_QuotaUpdated:
		e.Data = capacity.QuotaUpdated{Min: x.QuotaUpdated.GetMinUnits(), Max: x.QuotaUpdated.GetMaxUnits()}
	case *quotav1.QuotaEvent_QuotaUnsubscribed:
		e.Data = capacity.QuotaUnsubscribed{Reason: x.QuotaUnsubscribed.GetReason()}
	case *quotav1.QuotaEvent_QuotaDeleted:
		e.Data = capacity.QuotaDeleted{}
	case *quotav1.QuotaEvent_QuotaProduced:
		p := capacity.QuotaProduced{}
		for _, w := range x.QuotaProduced.GetWorkGroups() {
			p.WorkGroups = append(p.WorkGroups, capacity.ProducedWorkGroup{QuotaID: w.GetQuotaId(), QuotaName: w.GetQuotaName(),
				WorkGroupID: w.GetWorkGroupId(), MachineType: w.GetMachineType(), GPUs: w.GetGpus()})
		}
		e.Data = p
	case *quotav1.QuotaEvent_QuotaProductionFailed:
		e.Data = capacity.QuotaProductionFailed{Reason: x.QuotaProductionFailed.GetReason()}
	case *quotav1.QuotaEvent_RayClusterProvisioning:
		d := x.RayClusterProvisioning
		e.Data = capacity.RayClusterProvisioning{Cluster: d.GetCluster(), RayName: d.GetRayName(), CUQuotaID: d.GetCuQuotaId(), CUQuotaName: d.GetCuQuotaName()}
	case *quotav1.QuotaEvent_RayClusterApplied:
		e.Data = capacity.RayClusterApplied{}
	case *quotav1.QuotaEvent_RayClusterRunning:
		e.Data = capacity.RayClusterRunning{Endpoint: x.RayClusterRunning.GetEndpoint()}
	case *quotav1.QuotaEvent_RayClusterFailed:
		e.Data = capacity.RayClusterFailed{Reason: x.RayClusterFailed.GetReason()}
	case *quotav1.QuotaEvent_WorkGroupProvisioning:
		d := x.WorkGroupProvisioning
		e.Data = capacity.WorkGroupProvisioning{WorkGroupID: d.GetWorkGroupId(), QuotaID: d.GetQuotaId(), QuotaName: d.GetQuotaName(),
			RayCluster: d.GetRayClusterId(), Cluster: d.GetCluster(), MachineType: d.GetMachineType(), GPUs: d.GetGpus()}
	case *quotav1.QuotaEvent_WorkGroupApplied:
		e.Data = capacity.WorkGroupApplied{Generation: x.WorkGroupApplied.GetGeneration()}
	case *quotav1.QuotaEvent_WorkGroupSpecChanged:
		e.Data = capacity.WorkGroupSpecChanged{Generation: x.WorkGroupSpecChanged.GetGeneration(), GPUs: x.WorkGroupSpecChanged.GetGpus()}
	case *quotav1.QuotaEvent_WorkGroupRunning:
		e.Data = capacity.WorkGroupRunning{GPUs: x.WorkGroupRunning.GetGpus()}
	case *quotav1.QuotaEvent_WorkGroupFailed:
		e.Data = capacity.WorkGroupFailed{Reason: x.WorkGroupFailed.GetReason()}
	case *quotav1.QuotaEvent_WorkGroupDeleting:
		e.Data = capacity.WorkGroupDeleting{}
	case *quotav1.QuotaEvent_WorkGroupDeleted:
		e.Data = capacity.WorkGroupDeleted{}
	default:
		return e, false, nil
	}
	return e, true, nil
}
