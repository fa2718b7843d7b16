package capacity

import (
	"fmt"
	"strconv"
	"time"
)

// Spec describes a quota to create and, nested at any depth, its children.
type Spec struct {
	Name        string
	Min, Max    int64
	Background  bool
	MachineType string
	Children    []Spec
}

// CreateQuota is the production request: a root quota of TenantID on
// Cluster, or (ParentID set) a subtree under an existing quota.
type CreateQuota struct {
	TenantID, Cluster, ParentID string
	Kind                        Kind
	Spec                        Spec
}

// ProductionState is what deciding a production needs to know.
type ProductionState struct {
	Tenant  Tenant
	Cluster Cluster
	// Parent and its siblings-to-be (the parent's open children), when
	// CreateQuota.ParentID is set.
	Parent   Quota
	Siblings []Quota
	// The tenant's open quotas: names must be unique among them, and the
	// Ray cluster runs under its CU quota.
	TenantQuotas []Quota
	// The Ray cluster of ⟨tenant, cluster⟩ (zero when none).
	Ray RayCluster
	// The WorkGroup quota above Parent (level ≥ 2) and its WorkGroup, whose
	// spec then changes.
	Anchor          Quota
	AnchorWorkGroup WorkGroup
	NewID           func() string
	Now             time.Time
}

// Suffixes of the standard children a root gets when none are given.
const (
	DefaultSuffix    = "-default"
	BackgroundSuffix = "-background"
)

// Produce decides a production (docs/api/quota.md, "Production and unsubscription"): it validates the
// tree, checks the cluster's inventory for a GU root (ErrInventoryInsufficient
// and nothing recorded when short), and returns the events that create the
// quotas, reserve the inventory, and ask for the Ray cluster (when the
// tenant has no usable one on the cluster) and one WorkGroup per
// non-background second-level GU quota. The first returned QuotaCreated is
// the requested quota.
func Produce(cmd CreateQuota, st ProductionState) ([]Event, error) {
	// A root names its tenant, as it names its cluster and kind; a subtree
	// takes its parent's.
	if cmd.ParentID == "" && cmd.TenantID == "" {
		return nil, invalid("tenant_id", "is required for a root quota")
	}
	if !st.Tenant.Exists() {
		return nil, NotFound("tenant", cmd.TenantID)
	}
	spec := cmd.Spec
	var parent *Quota
	if cmd.ParentID != "" {
		p := st.Parent
		// Another tenant's quota is not found, never forbidden: whether it
		// exists is not the caller's to learn.
		if !p.Exists() || p.TenantID != cmd.TenantID || p.Status == QuotaDeletedStatus {
			return nil, NotFound("quota", cmd.ParentID)
		}
		if !p.Open() {
			return nil, conflict("quota %s is being unsubscribed", p.ID)
		}
		if cmd.Cluster != "" && cmd.Cluster != p.Cluster {
			return nil, invalid("cluster", "must be the parent's (%s)", p.Cluster)
		}
		if cmd.Kind != "" && cmd.Kind != p.Kind {
			return nil, invalid("kind", "must be the parent's (%s)", p.Kind)
		}
		if p.Background {
			return nil, invalid("parent_id", "the background quota has no children")
		}
		// A subtree below a WorkGroup quota changes that WorkGroup's spec;
		// with no resource to apply it to (being deleted, or gone) the
		// change would be lost, so it is refused.
		if st.Anchor.Exists() && !st.AnchorWorkGroup.ResourceExists() {
			return nil, conflict("the WorkGroup of quota %s does not exist (%s)", st.Anchor.ID, st.AnchorWorkGroup.Status)
		}
		// A child takes its parent's cluster and kind: a tree never spans
		// clusters or mixes CU with GU.
		cmd.Cluster, cmd.Kind = p.Cluster, p.Kind
		parent = &p
	} else {
		if cmd.Cluster == "" {
			return nil, invalid("cluster", "is required for a root quota")
		}
		if cmd.Kind == "" {
			return nil, invalid("kind", "is required for a root quota")
		}
		if spec.Background {
			return nil, invalid("spec.background", "a root quota cannot be the background quota")
		}
		if len(spec.Children) == 0 {
			// The standard second level: one quota that gets the whole
			// root (and the Ray WorkGroup), and the background quota.
			spec.Children = []Spec{
				{Name: spec.Name + DefaultSuffix, Min: spec.Min, Max: spec.Max},
				{Name: spec.Name + BackgroundSuffix, Min: 0, Max: spec.Max, Background: true},
			}
		}
	}
	if !st.Cluster.Exists() {
		return nil, NotFound("cluster", cmd.Cluster)
	}
	if cmd.Kind != KindGU && cmd.Kind != KindCU {
		return nil, invalid("kind", "must be GU or CU")
	}

	// Names are unique among the tenant's open quotas, because a name is how
	// tasks and the GU check refer to a quota; a deleted quota's name is
	// free again.
	names := map[string]bool{}
	for _, q := range st.TenantQuotas {
		if q.Open() {
			names[q.Name] = true
		}
	}
	level, machineType := 1, spec.MachineType
	if parent != nil {
		level, machineType = parent.Level+1, parent.MachineType
		// A GU tree counts GPUs of one machine type: the one its root
		// reserved.
		if spec.MachineType != "" && cmd.Kind == KindGU && spec.MachineType != parent.MachineType {
			return nil, invalid("spec.machine_type", "must be the parent's (%s)", parent.MachineType)
		}
		// A child may never use more than its parent, and the children's
		// minimums must fit in the parent's: min_units is a guarantee the
		// parent has to be able to keep. The background child guarantees
		// nothing, so it stays out of the sum.
		if spec.Max > parent.Max {
			return nil, invalid("spec.max_units", "%d exceeds the parent's max_units %d", spec.Max, parent.Max)
		}
		if !spec.Background {
			sum := spec.Min
			for _, s := range st.Siblings {
				if s.Open() && !s.Background {
					sum += s.Min
				}
			}
			if sum > parent.Min {
				return nil, invalid("spec.min_units", "the children's min_units (%d with this one) exceed the parent's min_units %d", sum, parent.Min)
			}
		}
		if spec.Background {
			if level != 2 {
				return nil, invalid("spec.background", "only a second-level quota can be the background quota")
			}
			for _, s := range st.Siblings {
				// One background child per parent: the place for work
				// without a guarantee.
				if s.Open() && s.Background {
					return nil, exists("background quota of", parent.Name)
				}
			}
		}
	}
	switch {
	// A GU root names the machine type of its GPUs; a CU quota counts
	// compute units, which have none.
	case cmd.Kind == KindGU && machineType == "":
		return nil, invalid("spec.machine_type", "is required for a GU root quota")
	case cmd.Kind == KindCU && spec.MachineType != "":
		return nil, invalid("spec.machine_type", "is for GU quotas only")
	}
	if err := checkSpec("spec", spec, level, cmd.Kind, machineType, names); err != nil {
		return nil, err
	}

	p := &planner{cmd: cmd, st: st, machineType: machineType}
	if parent == nil {
		if cmd.Kind == KindGU {
			// Only a GU root takes inventory, and only its min_units: a
			// guarantee must exist on the cluster, while what max_units
			// allows above it is borrowed from what others leave idle.
			// Checked before anything is recorded, so a short cluster
			// creates nothing (31003).
			inv := st.Cluster.Inventory[machineType]
			if inv.Available() < spec.Min {
				return nil, fmt.Errorf("%w: cluster %s has %d free GPUs of %s; the quota needs %d",
					ErrInventoryInsufficient, cmd.Cluster, inv.Available(), machineType, spec.Min)
			}
		}
		p.add(spec, level, Quota{}, Quota{})
	} else {
		// A subtree joins its parent's tree: every node carries the root's
		// id, which is how a tree is found, and unsubscribed, whole.
		root := Quota{ID: parent.RootID}
		p.add(spec, level, *parent, root)
	}
	return p.finish(parent), nil
}

// checkSpec validates one node and, recursively, its children: limits,
// machine type, unique names, and the background quota's place.
func checkSpec(field string, s Spec, level int, kind Kind, machineType string, names map[string]bool) error {
	switch {
	case s.Name == "":
		return invalid(field+".name", "is required")
	case names[s.Name]:
		return exists("quota", s.Name)
	case s.Min < 0:
		return invalid(field+".min_units", "must not be negative")
	case s.Max < 1:
		return invalid(field+".max_units", "must be at least 1")
	case s.Min > s.Max:
		return invalid(field+".min_units", "%d exceeds max_units %d", s.Min, s.Max)
	case s.Background && level != 2:
		return invalid(field+".background", "only a second-level quota can be the background quota")
	case s.Background && len(s.Children) > 0:
		return invalid(field+".children", "the background quota has no children")
	case kind == KindGU && s.MachineType != "" && s.MachineType != machineType:
		return invalid(field+".machine_type", "must be the root's (%s)", machineType)
	case kind == KindCU && s.MachineType != "":
		return invalid(field+".machine_type", "is for GU quotas only")
	}
	// Marked before the children are checked, so a child named like its
	// parent or a sibling is caught too.
	names[s.Name] = true
	var sum int64
	backgrounds := 0
	for i, c := range s.Children {
		cf := field + ".children[" + strconv.Itoa(i) + "]"
		// The rules of a parent with existing children (Produce above), for
		// every node of a tree given whole: a tree created at once must hold
		// what one grown node by node does.
		if c.Max > s.Max {
			return invalid(cf+".max_units", "%d exceeds the parent's max_units %d", c.Max, s.Max)
		}
		if c.Background {
			backgrounds++
		} else {
			sum += c.Min
		}
		if err := checkSpec(cf, c, level+1, kind, machineType, names); err != nil {
			return err
		}
	}
	if backgrounds > 1 {
		return invalid(field+".children", "at most one background quota")
	}
	if sum > s.Min {
		return invalid(field+".children", "the children's min_units (%d) exceed the parent's min_units %d", sum, s.Min)
	}
	return nil
}

// planner turns a validated tree into events.
type planner struct {
	cmd         CreateQuota
	st          ProductionState
	machineType string
	quotas      []Event
	wgs         []Event
	ray         []Event
	rayPlanned  bool
}

func (p *planner) event(agg string, data any) Event {
	return Event{Aggregate: agg, TenantID: p.cmd.TenantID, At: p.st.Now, Data: data}
}

func (p *planner) add(s Spec, level int, parent, root Quota) {
	id := p.st.NewID()
	rootID := root.ID
	if level == 1 {
		rootID = id
	}
	qc := QuotaCreated{ID: id, Name: s.Name, Kind: p.cmd.Kind, Cluster: p.cmd.Cluster, Level: level,
		ParentID: parent.ID, RootID: rootID, Background: s.Background, Min: s.Min, Max: s.Max}
	if p.cmd.Kind == KindGU {
		qc.MachineType = p.machineType
	}
	q := Quota{}.Apply(p.event(QuotaAggregate(id), qc))
	// A quota with a WorkGroup is Provisioning until the WorkGroup runs
	// (SettleProduction); any other quota is usable at once.
	if q.HasWorkGroup() {
		qc.Provisioning = true
		p.workGroup(q)
	}
	idx := len(p.quotas)
	p.quotas = append(p.quotas, p.event(QuotaAggregate(id), qc))
	wgsBefore := len(p.wgs)
	for _, c := range s.Children {
		p.add(c, level+1, q, Quota{ID: rootID})
	}
	// A GU root is produced when the WorkGroups below it run, so it is
	// Provisioning too when its subtree asked for one; that is known only
	// once the children are planned.
	if level == 1 && p.cmd.Kind == KindGU && len(p.wgs) > wgsBefore {
		qc.Provisioning = true
		p.quotas[idx].Data = qc
	}
}

// workGroup asks for q's WorkGroup, and for the Ray cluster first when the
// tenant has no usable one on the cluster (create ⟨Ray cluster,
// WorkGroup⟩ together, otherwise only the WorkGroup).
func (p *planner) workGroup(q Quota) {
	ray := p.st.Ray
	name := RayName(p.cmd.TenantID, p.cmd.Cluster)
	// A WorkGroup lives in the tenant's Ray cluster on the cluster: ask for
	// one when there is none usable, once per production however many
	// WorkGroups need it.
	if !ray.Usable() && !p.rayPlanned {
		cu := p.cuQuota()
		p.ray = append(p.ray, p.event(RayAggregate(p.cmd.TenantID, p.cmd.Cluster), RayClusterProvisioning{
			Cluster: p.cmd.Cluster, RayName: name, CUQuotaID: cu.ID, CUQuotaName: cu.Name}))
		p.rayPlanned = true
	}
	p.wgs = append(p.wgs, p.event(WorkGroupAggregate(q.ID), WorkGroupProvisioning{
		WorkGroupID: WorkGroupName(q.ID), QuotaID: q.ID, QuotaName: q.Name, RayCluster: name,
		Cluster: p.cmd.Cluster, MachineType: q.MachineType, GPUs: q.Min}))
}

// cuQuota is the tenant's CU quota on the cluster that the Ray head and CU
// pods run under: a non-background second-level one (never the background
// quota).
func (p *planner) cuQuota() Quota {
	// The Ray head needs some CU quota to run under; without one the
	// operator runs it under none (RaySpec).
	for _, q := range p.st.TenantQuotas {
		if q.Kind == KindCU && q.Cluster == p.cmd.Cluster && q.Level == 2 && !q.Background && q.Open() {
			return q
		}
	}
	return Quota{}
}

func (p *planner) finish(parent *Quota) []Event {
	var out []Event
	// The reservation is recorded with the quotas it backs, in the same
	// transaction, so inventory and quotas never disagree.
	if parent == nil && p.cmd.Kind == KindGU && p.cmd.Spec.Min > 0 {
		out = append(out, Event{Aggregate: ClusterAggregate(p.cmd.Cluster), At: p.st.Now, TenantID: p.cmd.TenantID,
			Data: InventoryReserved{MachineType: p.machineType, GPUs: p.cmd.Spec.Min, QuotaID: p.quotas[0].Data.(QuotaCreated).ID}})
	}
	out = append(out, p.quotas...)
	// Quotas, then the Ray cluster, then the WorkGroups placed in it: the
	// order in which they come into being.
	out = append(out, p.ray...)
	out = append(out, p.wgs...)
	if parent != nil && p.st.Anchor.Exists() {
		// A quota added below a WorkGroup quota changes that WorkGroup's
		// spec (the nested quotas it carries): apply it again.
		wg := p.st.AnchorWorkGroup
		out = append(out, p.event(WorkGroupAggregate(p.st.Anchor.ID), WorkGroupSpecChanged{Generation: wg.Generation + 1, GPUs: wg.GPUs}))
	}
	return out
}

// RayName is the name of the Ray cluster of ⟨tenant, cluster⟩, unique to
// the pair (ScopedName).
func RayName(tenant, cluster string) string { return ScopedName("ray", tenant, cluster) }

// WorkGroupName is the name of a quota's WorkGroup resource.
func WorkGroupName(quotaID string) string { return "wg-" + quotaID }
