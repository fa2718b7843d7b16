package admitcore

import (
	"fmt"
	"slices"
)

// MaxQuantity bounds every quota and request. It leaves room for sums over
// many queues without int64 overflow (sums of quotas saturate anyway).
const MaxQuantity int64 = 1 << 60

// Config is the whole admission topology: ClusterQueues and cohorts.
type Config struct {
	ClusterQueues []ClusterQueue
	Cohorts       []Cohort
}

// ClusterQueue is a queue of workloads with its own quota (Kueue's
// ClusterQueue). A ClusterQueue in a cohort may borrow the cohort's unused
// quota and lends its own.
type ClusterQueue struct {
	Name string
	// Cohort is the cohort the queue shares quota with; "" for none.
	Cohort           string
	ResourceGroups   []ResourceGroup
	QueueingStrategy QueueingStrategy // "" means BestEffortFIFO, as in Kueue
	Preemption       Preemption
}

// Cohort groups ClusterQueues (and child cohorts) that share quota. Its own
// resource groups are extra quota that only its subtree uses, lendable to
// its parent subject to lendingLimit.
type Cohort struct {
	Name string
	// Parent is the parent cohort; "" for a root.
	Parent         string
	ResourceGroups []ResourceGroup
}

// ResourceGroup is a set of resources that must come from the same flavor
// (e.g. cpu and memory of one machine type), with the flavors to try in
// order.
type ResourceGroup struct {
	CoveredResources []string
	Flavors          []FlavorQuotas
}

// FlavorQuotas is one flavor's quota for every covered resource of its
// group, listed in the order of CoveredResources.
type FlavorQuotas struct {
	Name      string
	Resources []ResourceQuota
}

// ResourceQuota is the quota of one resource in one flavor.
type ResourceQuota struct {
	Name         string
	NominalQuota int64
	// BorrowingLimit caps how much above NominalQuota the node may use from
	// its cohort; nil means unlimited.
	BorrowingLimit *int64
	// LendingLimit caps how much of NominalQuota the cohort may use; the
	// rest is guaranteed to the node. nil means everything is lendable.
	LendingLimit *int64
}

// QueueingStrategy orders and requeues a ClusterQueue's workloads.
type QueueingStrategy string

const (
	// StrictFIFO: a head that does not fit blocks everything behind it.
	StrictFIFO QueueingStrategy = "StrictFIFO"
	// BestEffortFIFO: a head that does not fit is set aside until capacity
	// in its queue or cohort is released, and the next workload is tried.
	BestEffortFIFO QueueingStrategy = "BestEffortFIFO"
)

// PreemptionPolicy says which admitted workloads a pending one may preempt.
type PreemptionPolicy string

const (
	// Never preempt (the default).
	Never PreemptionPolicy = "Never"
	// LowerPriority: only workloads of lower priority.
	LowerPriority PreemptionPolicy = "LowerPriority"
	// LowerOrNewerEqualPriority: lower priority, or equal priority and
	// created after the preemptor (withinClusterQueue only).
	LowerOrNewerEqualPriority PreemptionPolicy = "LowerOrNewerEqualPriority"
	// Any: any workload of a borrowing ClusterQueue, whatever its priority
	// (reclaimWithinCohort only): the preemptor takes back lent quota.
	Any PreemptionPolicy = "Any"
)

// Preemption is a ClusterQueue's preemption policy.
type Preemption struct {
	// WithinClusterQueue: Never, LowerPriority or LowerOrNewerEqualPriority.
	WithinClusterQueue PreemptionPolicy
	// ReclaimWithinCohort: Never, LowerPriority or Any. Candidates are
	// workloads of other ClusterQueues of the cohort that use more than
	// their nominal quota.
	ReclaimWithinCohort PreemptionPolicy
	// MinPriorityGap is how many priority levels a victim must be below the
	// preemptor when the policy compares priorities (the embedded defaults use 3).
	// 0 keeps Kueue's rule: any lower priority. Any ignores it: reclaiming
	// lent quota does not depend on priority.
	MinPriorityGap int
}

// withImplicitCohorts is c with a cohort of no quota and no parent for
// every cohort a ClusterQueue or cohort names without defining it: as in
// Kueue, naming a cohort is enough to make it, and its members share
// their unused quota through it (docs/api/quota.md#queue-admission). c is
// not changed; the implicit cohorts come after the defined ones, in name
// order, so the result is deterministic.
func (c Config) withImplicitCohorts() Config {
	defined := make(map[string]bool, len(c.Cohorts))
	for _, ch := range c.Cohorts {
		defined[ch.Name] = true
	}
	var implicit []string
	name := func(n string) {
		if n != "" && !defined[n] {
			defined[n] = true
			implicit = append(implicit, n)
		}
	}
	for _, cq := range c.ClusterQueues {
		name(cq.Cohort)
	}
	for _, ch := range c.Cohorts {
		name(ch.Parent)
	}
	if len(implicit) == 0 {
		return c
	}
	slices.Sort(implicit)
	out := Config{ClusterQueues: c.ClusterQueues, Cohorts: slices.Clip(c.Cohorts)}
	for _, n := range implicit {
		out.Cohorts = append(out.Cohorts, Cohort{Name: n})
	}
	return out
}

// validate checks everything New and Reconfigure refuse, returning the
// first problem found (in config order, so the error is deterministic).
func (c Config) validate() error {
	// Names first, then references: a parent or cohort may be named before
	// it is defined, so every name must be known before any reference is
	// checked.
	cohorts := make(map[string]*Cohort, len(c.Cohorts))
	for i := range c.Cohorts {
		ch := &c.Cohorts[i]
		if ch.Name == "" {
			return &ConfigError{Kind: "Cohort", Field: fmt.Sprintf("cohorts[%d].name", i), Err: ErrEmptyName}
		}
		if _, dup := cohorts[ch.Name]; dup {
			return &ConfigError{Kind: "Cohort", Name: ch.Name, Err: ErrDuplicateName}
		}
		cohorts[ch.Name] = ch
	}
	for i := range c.Cohorts {
		ch := &c.Cohorts[i]
		if ch.Parent != "" {
			if _, ok := cohorts[ch.Parent]; !ok {
				return &ConfigError{Kind: "Cohort", Name: ch.Name, Field: "parent", Err: fmt.Errorf("%w %q", ErrUnknownCohort, ch.Parent)}
			}
		}
		// A root cohort has nobody to borrow from or lend to, so limits on
		// it are refused like those of a queue without a cohort.
		if err := validateGroups(ch.ResourceGroups, ch.Parent != ""); err != nil {
			return &ConfigError{Kind: "Cohort", Name: ch.Name, Field: err.field, Err: err.err}
		}
	}
	// A cycle shows up as a walk longer than the number of cohorts.
	for i := range c.Cohorts {
		steps := 0
		for p := c.Cohorts[i].Parent; p != ""; p = cohorts[p].Parent {
			if steps++; steps > len(c.Cohorts) {
				return &ConfigError{Kind: "Cohort", Name: c.Cohorts[i].Name, Field: "parent", Err: ErrCohortCycle}
			}
		}
	}
	queues := make(map[string]bool, len(c.ClusterQueues))
	for i := range c.ClusterQueues {
		cq := &c.ClusterQueues[i]
		if cq.Name == "" {
			return &ConfigError{Kind: "ClusterQueue", Field: fmt.Sprintf("clusterQueues[%d].name", i), Err: ErrEmptyName}
		}
		if queues[cq.Name] {
			return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Err: ErrDuplicateName}
		}
		queues[cq.Name] = true
		if cq.Cohort != "" {
			if _, ok := cohorts[cq.Cohort]; !ok {
				return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Field: "cohort", Err: fmt.Errorf("%w %q", ErrUnknownCohort, cq.Cohort)}
			}
		}
		// Unknown strategies and policies are errors, not defaults: a
		// misspelt "LowerPriorty" must not silently mean Never.
		switch cq.QueueingStrategy {
		case "", StrictFIFO, BestEffortFIFO:
		default:
			return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Field: "queueingStrategy", Err: fmt.Errorf("%w: %q", ErrInvalidPolicy, cq.QueueingStrategy)}
		}
		switch cq.Preemption.WithinClusterQueue {
		case "", Never, LowerPriority, LowerOrNewerEqualPriority:
		default:
			return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Field: "preemption.withinClusterQueue", Err: fmt.Errorf("%w: %q", ErrInvalidPolicy, cq.Preemption.WithinClusterQueue)}
		}
		switch cq.Preemption.ReclaimWithinCohort {
		case "", Never, LowerPriority, Any:
		default:
			return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Field: "preemption.reclaimWithinCohort", Err: fmt.Errorf("%w: %q", ErrInvalidPolicy, cq.Preemption.ReclaimWithinCohort)}
		}
		// A negative gap would let a workload preempt one of higher
		// priority.
		if cq.Preemption.MinPriorityGap < 0 {
			return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Field: "preemption.minPriorityGap", Err: fmt.Errorf("%w: negative gap %d", ErrInvalidPolicy, cq.Preemption.MinPriorityGap)}
		}
		if err := validateGroups(cq.ResourceGroups, cq.Cohort != ""); err != nil {
			return &ConfigError{Kind: "ClusterQueue", Name: cq.Name, Field: err.field, Err: err.err}
		}
	}
	return nil
}

type fieldError struct {
	field string
	err   error
}

// validateGroups applies Kueue's resource group rules: a resource is
// covered by one group, a flavor appears in one group, and each flavor lists
// exactly the covered resources in order.
func validateGroups(groups []ResourceGroup, hasCohort bool) *fieldError {
	covered := map[string]bool{}
	flavors := map[string]bool{}
	for gi, g := range groups {
		gf := fmt.Sprintf("resourceGroups[%d]", gi)
		if len(g.CoveredResources) == 0 {
			return &fieldError{gf + ".coveredResources", fmt.Errorf("%w: no covered resources", ErrInvalidResourceGroup)}
		}
		for ri, r := range g.CoveredResources {
			if r == "" {
				return &fieldError{fmt.Sprintf("%s.coveredResources[%d]", gf, ri), ErrEmptyName}
			}
			// A resource in two groups would have two flavors, and be
			// charged twice.
			if covered[r] {
				return &fieldError{fmt.Sprintf("%s.coveredResources[%d]", gf, ri), fmt.Errorf("%w: resource %q covered twice", ErrInvalidResourceGroup, r)}
			}
			covered[r] = true
		}
		if len(g.Flavors) == 0 {
			return &fieldError{gf + ".flavors", fmt.Errorf("%w: no flavors", ErrInvalidResourceGroup)}
		}
		for fi, f := range g.Flavors {
			ff := fmt.Sprintf("%s.flavors[%d]", gf, fi)
			if f.Name == "" {
				return &fieldError{ff + ".name", ErrEmptyName}
			}
			// A flavor in two groups would charge one flavor/resource pair
			// from two places.
			if flavors[f.Name] {
				return &fieldError{ff + ".name", fmt.Errorf("%w: flavor %q used twice", ErrInvalidResourceGroup, f.Name)}
			}
			flavors[f.Name] = true
			names := make([]string, len(f.Resources))
			for i, rq := range f.Resources {
				names[i] = rq.Name
			}
			// In the group's order, with nothing missing: the state resolves
			// a flavor's quota for a resource by its position in the group.
			if !slices.Equal(names, g.CoveredResources) {
				return &fieldError{ff + ".resources", fmt.Errorf("%w: flavor %q lists %v, want %v", ErrInvalidResourceGroup, f.Name, names, g.CoveredResources)}
			}
			for ri, rq := range f.Resources {
				rf := fmt.Sprintf("%s.resources[%d]", ff, ri)
				// Bounded so that sums over a whole tree stay far from
				// int64's limit.
				if rq.NominalQuota < 0 || rq.NominalQuota > MaxQuantity {
					return &fieldError{rf + ".nominalQuota", fmt.Errorf("%w: %d", ErrInvalidQuantity, rq.NominalQuota)}
				}
				if rq.BorrowingLimit != nil {
					if !hasCohort {
						return &fieldError{rf + ".borrowingLimit", ErrLimitWithoutCohort}
					}
					if *rq.BorrowingLimit < 0 || *rq.BorrowingLimit > MaxQuantity {
						return &fieldError{rf + ".borrowingLimit", fmt.Errorf("%w: %d", ErrInvalidQuantity, *rq.BorrowingLimit)}
					}
				}
				if rq.LendingLimit != nil {
					if !hasCohort {
						return &fieldError{rf + ".lendingLimit", ErrLimitWithoutCohort}
					}
					if *rq.LendingLimit < 0 || *rq.LendingLimit > MaxQuantity {
						return &fieldError{rf + ".lendingLimit", fmt.Errorf("%w: %d", ErrInvalidQuantity, *rq.LendingLimit)}
					}
					if *rq.LendingLimit > rq.NominalQuota {
						return &fieldError{rf + ".lendingLimit", fmt.Errorf("%w: %d > %d", ErrLendingAboveNominal, *rq.LendingLimit, rq.NominalQuota)}
					}
				}
			}
		}
	}
	return nil
}

// clone deep-copies the config so later changes by the caller cannot reach
// the state.
func (c Config) clone() Config {
	out := Config{
		ClusterQueues: make([]ClusterQueue, len(c.ClusterQueues)),
		Cohorts:       make([]Cohort, len(c.Cohorts)),
	}
	for i, cq := range c.ClusterQueues {
		cq.ResourceGroups = cloneGroups(cq.ResourceGroups)
		out.ClusterQueues[i] = cq
	}
	for i, ch := range c.Cohorts {
		ch.ResourceGroups = cloneGroups(ch.ResourceGroups)
		out.Cohorts[i] = ch
	}
	return out
}

func cloneGroups(groups []ResourceGroup) []ResourceGroup {
	out := make([]ResourceGroup, len(groups))
	for i, g := range groups {
		g.CoveredResources = slices.Clone(g.CoveredResources)
		fl := make([]FlavorQuotas, len(g.Flavors))
		for j, f := range g.Flavors {
			rs := make([]ResourceQuota, len(f.Resources))
			for k, rq := range f.Resources {
				if rq.BorrowingLimit != nil {
					rq.BorrowingLimit = new(*rq.BorrowingLimit)
				}
				if rq.LendingLimit != nil {
					rq.LendingLimit = new(*rq.LendingLimit)
				}
				rs[k] = rq
			}
			f.Resources = rs
			fl[j] = f
		}
		g.Flavors = fl
		out[i] = g
	}
	return out
}
