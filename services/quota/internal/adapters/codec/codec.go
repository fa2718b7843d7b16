// Package codec converts quota events between the domain's Go types and
// the protobuf envelope (quotav1.QuotaEvent) that the event store keeps and
// Kafka carries. Decode(Encode(e)) == e for every event, which is what lets
// the inline projection be rebuilt from the log.
package codec

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	domain "github.com/taskmesh/taskmesh/services/quota/internal/domain/quota"
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
func Marshal(eventID, actor string, e domain.Event, trace map[string]string) ([]byte, string, error) {
	env := &quotav1.QuotaEvent{EventId: eventID, AggregateId: e.Aggregate, Version: e.Version,
		OccurredAt: timestamppb.New(e.At), TenantId: e.TenantID, TraceContext: trace, Actor: actor}
	name, err := setEvent(env, e.Data)
	if err != nil {
		return nil, "", err
	}
	b, err := proto.Marshal(env)
	return b, name, err
}

func kind(k domain.Kind) quotav1.QuotaKind {
	switch k {
	case domain.KindCU:
		return quotav1.QuotaKind_QUOTA_KIND_CU
	case domain.KindGU:
		return quotav1.QuotaKind_QUOTA_KIND_GU
	}
	return quotav1.QuotaKind_QUOTA_KIND_UNSPECIFIED
}

func kindFrom(k quotav1.QuotaKind) domain.Kind {
	switch k {
	case quotav1.QuotaKind_QUOTA_KIND_CU:
		return domain.KindCU
	case quotav1.QuotaKind_QUOTA_KIND_GU:
		return domain.KindGU
	}
	return ""
}

// setEvent fills the envelope's oneof and returns the event type name.
func setEvent(env *quotav1.QuotaEvent, data any) (string, error) {
	switch d := data.(type) {
	case domain.TenantCreated:
		env.Event = &quotav1.QuotaEvent_TenantCreated{TenantCreated: &quotav1.TenantCreated{Name: d.Name}}
	case domain.TenantRenamed:
		env.Event = &quotav1.QuotaEvent_TenantRenamed{TenantRenamed: &quotav1.TenantRenamed{Name: d.Name}}
	case domain.ClusterCreated:
		env.Event = &quotav1.QuotaEvent_ClusterCreated{ClusterCreated: &quotav1.ClusterCreated{Name: d.Name, Description: d.Description}}
	case domain.InventorySet:
		env.Event = &quotav1.QuotaEvent_InventorySet{InventorySet: &quotav1.InventorySet{MachineType: d.MachineType, TotalGpus: d.Total}}
	case domain.InventoryReserved:
		env.Event = &quotav1.QuotaEvent_InventoryReserved{InventoryReserved: &quotav1.InventoryReserved{MachineType: d.MachineType, Gpus: d.GPUs, QuotaId: d.QuotaID}}
	case domain.InventoryReleased:
		env.Event = &quotav1.QuotaEvent_InventoryReleased{InventoryReleased: &quotav1.InventoryReleased{MachineType: d.MachineType, Gpus: d.GPUs, QuotaId: d.QuotaID}}
	case domain.QuotaCreated:
		env.Event = &quotav1.QuotaEvent_QuotaCreated{QuotaCreated: &quotav1.QuotaCreated{QuotaId: d.ID, Name: d.Name, Kind: kind(d.Kind),
			Cluster: d.Cluster, Level: int32(d.Level), ParentId: d.ParentID, Background: d.Background, MachineType: d.MachineType,
			MinUnits: d.Min, MaxUnits: d.Max, RootId: d.RootID, Provisioning: d.Provisioning}}
	case domain.QuotaUpdated:
		env.Event = &quotav1.QuotaEvent_QuotaUpdated{QuotaUpdated: &quotav1.QuotaUpdated{MinUnits: d.Min, MaxUnits: d.Max}}
	case domain.QuotaUnsubscribed:
		env.Event = &quotav1.QuotaEvent_QuotaUnsubscribed{QuotaUnsubscribed: &quotav1.QuotaUnsubscribed{Reason: d.Reason}}
	case domain.QuotaDeleted:
		env.Event = &quotav1.QuotaEvent_QuotaDeleted{QuotaDeleted: &quotav1.QuotaDeleted{}}
	case domain.QuotaProduced:
		p := &quotav1.QuotaProduced{}
		for _, w := range d.WorkGroups {
			p.WorkGroups = append(p.WorkGroups, &quotav1.ProducedWorkGroup{QuotaId: w.QuotaID, QuotaName: w.QuotaName,
				WorkGroupId: w.WorkGroupID, MachineType: w.MachineType, Gpus: w.GPUs})
		}
		env.Event = &quotav1.QuotaEvent_QuotaProduced{QuotaProduced: p}
	case domain.QuotaProductionFailed:
		env.Event = &quotav1.QuotaEvent_QuotaProductionFailed{QuotaProductionFailed: &quotav1.QuotaProductionFailed{Reason: d.Reason}}
	case domain.RayClusterProvisioning:
		env.Event = &quotav1.QuotaEvent_RayClusterProvisioning{RayClusterProvisioning: &quotav1.RayClusterProvisioning{Cluster: d.Cluster,
			RayName: d.RayName, CuQuotaId: d.CUQuotaID, CuQuotaName: d.CUQuotaName}}
	case domain.RayClusterApplied:
		env.Event = &quotav1.QuotaEvent_RayClusterApplied{RayClusterApplied: &quotav1.RayClusterApplied{}}
	case domain.RayClusterRunning:
		env.Event = &quotav1.QuotaEvent_RayClusterRunning{RayClusterRunning: &quotav1.RayClusterRunning{Endpoint: d.Endpoint}}
	case domain.RayClusterFailed:
		env.Event = &quotav1.QuotaEvent_RayClusterFailed{RayClusterFailed: &quotav1.RayClusterFailed{Reason: d.Reason}}
	case domain.WorkGroupProvisioning:
		env.Event = &quotav1.QuotaEvent_WorkGroupProvisioning{WorkGroupProvisioning: &quotav1.WorkGroupProvisioning{WorkGroupId: d.WorkGroupID,
			QuotaId: d.QuotaID, RayClusterId: d.RayCluster, MachineType: d.MachineType, Gpus: d.GPUs, QuotaName: d.QuotaName, Cluster: d.Cluster}}
	case domain.WorkGroupApplied:
		env.Event = &quotav1.QuotaEvent_WorkGroupApplied{WorkGroupApplied: &quotav1.WorkGroupApplied{Generation: d.Generation}}
	case domain.WorkGroupSpecChanged:
		env.Event = &quotav1.QuotaEvent_WorkGroupSpecChanged{WorkGroupSpecChanged: &quotav1.WorkGroupSpecChanged{Generation: d.Generation, Gpus: d.GPUs}}
	case domain.WorkGroupRunning:
		env.Event = &quotav1.QuotaEvent_WorkGroupRunning{WorkGroupRunning: &quotav1.WorkGroupRunning{Gpus: d.GPUs}}
	case domain.WorkGroupFailed:
		env.Event = &quotav1.QuotaEvent_WorkGroupFailed{WorkGroupFailed: &quotav1.WorkGroupFailed{Reason: d.Reason}}
	case domain.WorkGroupDeleting:
		env.Event = &quotav1.QuotaEvent_WorkGroupDeleting{WorkGroupDeleting: &quotav1.WorkGroupDeleting{}}
	case domain.WorkGroupDeleted:
		env.Event = &quotav1.QuotaEvent_WorkGroupDeleted{WorkGroupDeleted: &quotav1.WorkGroupDeleted{}}
	default:
		return "", fmt.Errorf("codec: unknown event %T", data)
	}
	return fmt.Sprintf("%T", data)[len("quota."):], nil
}

// Unmarshal decodes an envelope back into a domain event. Events of the
// admission layer (oneof numbers 50 and up) yield ok == false.
func Unmarshal(payload []byte) (domain.Event, bool, error) {
	var env quotav1.QuotaEvent
	if err := proto.Unmarshal(payload, &env); err != nil {
		return domain.Event{}, false, fmt.Errorf("codec: %w", err)
	}
	e := domain.Event{Aggregate: env.GetAggregateId(), Version: env.GetVersion(), TenantID: env.GetTenantId(),
		At: env.GetOccurredAt().AsTime().In(time.UTC)}
	switch x := env.GetEvent().(type) {
	case *quotav1.QuotaEvent_TenantCreated:
		e.Data = domain.TenantCreated{Name: x.TenantCreated.GetName()}
	case *quotav1.QuotaEvent_TenantRenamed:
		e.Data = domain.TenantRenamed{Name: x.TenantRenamed.GetName()}
	case *quotav1.QuotaEvent_ClusterCreated:
		e.Data = domain.ClusterCreated{Name: x.ClusterCreated.GetName(), Description: x.ClusterCreated.GetDescription()}
	case *quotav1.QuotaEvent_InventorySet:
		e.Data = domain.InventorySet{MachineType: x.InventorySet.GetMachineType(), Total: x.InventorySet.GetTotalGpus()}
	case *quotav1.QuotaEvent_InventoryReserved:
		d := x.InventoryReserved
		e.Data = domain.InventoryReserved{MachineType: d.GetMachineType(), GPUs: d.GetGpus(), QuotaID: d.GetQuotaId()}
	case *quotav1.QuotaEvent_InventoryReleased:
		d := x.InventoryReleased
		e.Data = domain.InventoryReleased{MachineType: d.GetMachineType(), GPUs: d.GetGpus(), QuotaID: d.GetQuotaId()}
	case *quotav1.QuotaEvent_QuotaCreated:
		d := x.QuotaCreated
		e.Data = domain.QuotaCreated{ID: d.GetQuotaId(), Name: d.GetName(), Kind: kindFrom(d.GetKind()), Cluster: d.GetCluster(),
			Level: int(d.GetLevel()), ParentID: d.GetParentId(), RootID: d.GetRootId(), Background: d.GetBackground(),
			MachineType: d.GetMachineType(), Min: d.GetMinUnits(), Max: d.GetMaxUnits(), Provisioning: d.GetProvisioning()}
	case *quotav1.QuotaEvent_QuotaUpdated:
		e.Data = domain.QuotaUpdated{Min: x.QuotaUpdated.GetMinUnits(), Max: x.QuotaUpdated.GetMaxUnits()}
	case *quotav1.QuotaEvent_QuotaUnsubscribed:
		e.Data = domain.QuotaUnsubscribed{Reason: x.QuotaUnsubscribed.GetReason()}
	case *quotav1.QuotaEvent_QuotaDeleted:
		e.Data = domain.QuotaDeleted{}
	case *quotav1.QuotaEvent_QuotaProduced:
		p := domain.QuotaProduced{}
		for _, w := range x.QuotaProduced.GetWorkGroups() {
			p.WorkGroups = append(p.WorkGroups, domain.ProducedWorkGroup{QuotaID: w.GetQuotaId(), QuotaName: w.GetQuotaName(),
				WorkGroupID: w.GetWorkGroupId(), MachineType: w.GetMachineType(), GPUs: w.GetGpus()})
		}
		e.Data = p
	case *quotav1.QuotaEvent_QuotaProductionFailed:
		e.Data = domain.QuotaProductionFailed{Reason: x.QuotaProductionFailed.GetReason()}
	case *quotav1.QuotaEvent_RayClusterProvisioning:
		d := x.RayClusterProvisioning
		e.Data = domain.RayClusterProvisioning{Cluster: d.GetCluster(), RayName: d.GetRayName(), CUQuotaID: d.GetCuQuotaId(), CUQuotaName: d.GetCuQuotaName()}
	case *quotav1.QuotaEvent_RayClusterApplied:
		e.Data = domain.RayClusterApplied{}
	case *quotav1.QuotaEvent_RayClusterRunning:
		e.Data = domain.RayClusterRunning{Endpoint: x.RayClusterRunning.GetEndpoint()}
	case *quotav1.QuotaEvent_RayClusterFailed:
		e.Data = domain.RayClusterFailed{Reason: x.RayClusterFailed.GetReason()}
	case *quotav1.QuotaEvent_WorkGroupProvisioning:
		d := x.WorkGroupProvisioning
		e.Data = domain.WorkGroupProvisioning{WorkGroupID: d.GetWorkGroupId(), QuotaID: d.GetQuotaId(), QuotaName: d.GetQuotaName(),
			RayCluster: d.GetRayClusterId(), Cluster: d.GetCluster(), MachineType: d.GetMachineType(), GPUs: d.GetGpus()}
	case *quotav1.QuotaEvent_WorkGroupApplied:
		e.Data = domain.WorkGroupApplied{Generation: x.WorkGroupApplied.GetGeneration()}
	case *quotav1.QuotaEvent_WorkGroupSpecChanged:
		e.Data = domain.WorkGroupSpecChanged{Generation: x.WorkGroupSpecChanged.GetGeneration(), GPUs: x.WorkGroupSpecChanged.GetGpus()}
	case *quotav1.QuotaEvent_WorkGroupRunning:
		e.Data = domain.WorkGroupRunning{GPUs: x.WorkGroupRunning.GetGpus()}
	case *quotav1.QuotaEvent_WorkGroupFailed:
		e.Data = domain.WorkGroupFailed{Reason: x.WorkGroupFailed.GetReason()}
	case *quotav1.QuotaEvent_WorkGroupDeleting:
		e.Data = domain.WorkGroupDeleting{}
	case *quotav1.QuotaEvent_WorkGroupDeleted:
		e.Data = domain.WorkGroupDeleted{}
	default:
		return e, false, nil
	}
	return e, true, nil
}
