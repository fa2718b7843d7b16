package capacity

import "time"

// RegisterTenant records tenant id with name, or renames it; the same name
// again records nothing.
func RegisterTenant(t Tenant, id, name string, now time.Time) ([]Event, error) {
	if id == "" {
		return nil, invalid("tenant_id", "is required")
	}
	if name == "" {
		return nil, invalid("name", "is required")
	}
	// The same name again records nothing, so registering is safe to
	// repeat.
	switch {
	case !t.Exists():
		return []Event{{Aggregate: TenantAggregate(id), TenantID: id, At: now, Data: TenantCreated{Name: name}}}, nil
	case t.Name != name:
		return []Event{{Aggregate: TenantAggregate(id), TenantID: id, At: now, Data: TenantRenamed{Name: name}}}, nil
	}
	return nil, nil
}

// CreateCluster records a cluster; ErrExists if it is known.
func CreateCluster(c Cluster, name, description string, now time.Time) ([]Event, error) {
	if name == "" {
		return nil, invalid("name", "is required")
	}
	if c.Exists() {
		return nil, exists("cluster", name)
	}
	return []Event{{Aggregate: ClusterAggregate(name), At: now, Data: ClusterCreated{Name: name, Description: description}}}, nil
}

// SetInventory sets the cluster's GPUs of machineType. It may not go below
// what quotas hold (ErrConflict); the same total records nothing.
func SetInventory(c Cluster, machineType string, total int64, now time.Time) ([]Event, error) {
	if !c.Exists() {
		return nil, NotFound("cluster", c.Name)
	}
	if machineType == "" {
		return nil, invalid("machine_type", "is required")
	}
	if total < 0 {
		return nil, invalid("total_gpus", "must not be negative")
	}
	cur, ok := c.Inventory[machineType]
	// Never below what quotas hold: the reservations are guarantees given to
	// tenants, and a smaller total would break one silently.
	if total < cur.Allocated {
		return nil, conflict("cluster %s: quotas hold %d GPUs of %s; the total cannot go below that", c.Name, cur.Allocated, machineType)
	}
	if ok && cur.Total == total {
		return nil, nil
	}
	return []Event{{Aggregate: ClusterAggregate(c.Name), At: now, Data: InventorySet{MachineType: machineType, Total: total}}}, nil
}
