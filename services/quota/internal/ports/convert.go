package ports

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func tenantToProto(t capacity.Tenant) *quotav1.Tenant {
	return &quotav1.Tenant{TenantId: t.ID, Name: t.Name, CreatedAt: ts(t.CreatedAt), UpdatedAt: ts(t.UpdatedAt)}
}

func inventoryToProto(cluster string, i capacity.Inventory) *quotav1.Inventory {
	return &quotav1.Inventory{Cluster: cluster, MachineType: i.MachineType, TotalGpus: i32(i.Total), AllocatedGpus: i32(i.Allocated),
		AvailableGpus: i32(i.Available())}
}

func clusterToProto(c capacity.Cluster) *quotav1.Cluster {
	out := &quotav1.Cluster{Name: c.Name, Description: c.Description, CreatedAt: ts(c.CreatedAt), UpdatedAt: ts(c.UpdatedAt)}
	for _, i := range c.Inventories() {
		out.Inventory = append(out.Inventory, inventoryToProto(c.Name, i))
	}
	return out
}

func workGroupToProto(w capacity.WorkGroup) *quotav1.WorkGroup {
	return &quotav1.WorkGroup{Id: w.ID, QuotaId: w.QuotaID, QuotaName: w.QuotaName, TenantId: w.TenantID, Cluster: w.Cluster,
		RayCluster: w.RayCluster, MachineType: w.MachineType, Gpus: i32(w.GPUs), Status: w.Status, Reason: w.Reason,
		CreatedAt: ts(w.CreatedAt), UpdatedAt: ts(w.UpdatedAt)}
}

func quotaToProto(v app.QuotaView) *quotav1.Quota {
	q := v.Quota
	out := &quotav1.Quota{Id: q.ID, TenantId: q.TenantID, Name: q.Name, Kind: string(q.Kind), Cluster: q.Cluster,
		Level: int32(q.Level), ParentId: q.ParentID, RootId: q.RootID, Background: q.Background, MachineType: q.MachineType,
		MinUnits: i32(q.Min), MaxUnits: i32(q.Max), Status: q.Status, Reason: q.Reason, CreatedAt: ts(q.CreatedAt), UpdatedAt: ts(q.UpdatedAt)}
	if v.WorkGroup != nil {
		out.WorkGroup = workGroupToProto(*v.WorkGroup)
	}
	for _, c := range v.Children {
		out.Children = append(out.Children, quotaToProto(c))
	}
	return out
}

func rayToProto(r capacity.RayCluster) *quotav1.RayCluster {
	return &quotav1.RayCluster{Name: r.Name, TenantId: r.TenantID, Cluster: r.Cluster, Status: r.Status, Endpoint: r.Endpoint,
		Reason: r.Reason, CuQuotaId: r.CUQuotaID, CuQuotaName: r.CUQuotaName, CreatedAt: ts(r.CreatedAt), UpdatedAt: ts(r.UpdatedAt)}
}

func specFromProto(p *quotav1.QuotaSpec) capacity.Spec {
	s := capacity.Spec{Name: p.GetName(), Min: int64(p.GetMinUnits()), Max: int64(p.GetMaxUnits()), Background: p.GetBackground(),
		MachineType: p.GetMachineType()}
	for _, c := range p.GetChildren() {
		s.Children = append(s.Children, specFromProto(c))
	}
	return s
}

// i32 narrows a count for the API; counts are validated far below the
// int32 range (proto int32 keeps them JSON numbers), so clamping never
// happens in practice.
func i32(v int64) int32 {
	switch {
	case v > math.MaxInt32:
		return math.MaxInt32
	case v < math.MinInt32:
		return math.MinInt32
	}
	return int32(v)
}
