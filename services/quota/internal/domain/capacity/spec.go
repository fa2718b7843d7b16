package capacity

// RaySpec is what a cluster operator needs to create a Ray cluster.
type RaySpec struct {
	Name, TenantID, Cluster string
	// The tenant's CU quota the head and CU pods run under (may be empty).
	CUQuotaID, CUQuotaName string
}

// RaySpecOf returns the spec of a Ray cluster.
func RaySpecOf(r RayCluster) RaySpec {
	return RaySpec{Name: r.Name, TenantID: r.TenantID, Cluster: r.Cluster, CUQuotaID: r.CUQuotaID, CUQuotaName: r.CUQuotaName}
}

// WorkGroupSpec is what a cluster operator needs to create or update a
// WorkGroup. The quota named is the second-level quota the WorkGroup
// belongs to, never its root.
type WorkGroupSpec struct {
	Name, TenantID, Cluster, RayCluster string
	QuotaID, QuotaName, MachineType     string
	GPUs                                int64
	Generation                          int64
	// Quota is the second-level quota with its subtree nested at any depth.
	Quota QuotaNode
}

// QuotaNode is one quota of a WorkGroup spec.
type QuotaNode struct {
	ID, Name string
	Min, Max int64
	Children []QuotaNode
}

// WorkGroupSpecOf returns the spec of w, whose quota is q with subtree
// below it (open quotas only; any order).
func WorkGroupSpecOf(w WorkGroup, q Quota, subtree []Quota) WorkGroupSpec {
	children := map[string][]Quota{}
	for _, s := range subtree {
		if s.Open() {
			children[s.ParentID] = append(children[s.ParentID], s)
		}
	}
	var node func(Quota) QuotaNode
	node = func(x Quota) QuotaNode {
		n := QuotaNode{ID: x.ID, Name: x.Name, Min: x.Min, Max: x.Max}
		for _, c := range children[x.ID] {
			n.Children = append(n.Children, node(c))
		}
		return n
	}
	return WorkGroupSpec{Name: w.ID, TenantID: w.TenantID, Cluster: w.Cluster, RayCluster: w.RayCluster,
		QuotaID: q.ID, QuotaName: q.Name, MachineType: w.MachineType, GPUs: w.GPUs, Generation: w.Generation, Quota: node(q)}
}
