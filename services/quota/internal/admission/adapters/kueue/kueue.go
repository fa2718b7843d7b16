// Package kueue adapts the pure admission core (domain/admitcore) to the
// loop's app.Core: recorded protobuf definitions become the core's Config
// (quantities in milli-units), and its decisions, explanations and usage
// come back in the API's terms.
package kueue

import (
	"fmt"
	"maps"
	"slices"
	"time"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/domain/quantity"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/admitcore"
)

// Core is app.Core over *admitcore.State.
type Core struct {
	s *admitcore.State
	// prio remembers priorities to explain preemptions.
	prio map[string]int
}

// New implements app.NewCore.
func New(defs app.Definitions) (app.Core, error) {
	cfg, err := Config(defs)
	if err != nil {
		return nil, err
	}
	s, err := admitcore.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Core{s: s, prio: map[string]int{}}, nil
}

// Validate implements app.Validator: the core's own checks.
func Validate(defs app.Definitions) error {
	cfg, err := Config(defs)
	if err != nil {
		return err
	}
	_, err = admitcore.New(cfg)
	return err
}

// Config converts recorded definitions to the core's configuration, in
// name order so errors are deterministic. A quantity that does not parse
// is a *admitcore.ConfigError wrapping quantity.ErrInvalid.
func Config(defs app.Definitions) (admitcore.Config, error) {
	var cfg admitcore.Config
	for _, name := range slices.Sorted(maps.Keys(defs.Cohorts)) {
		spec := defs.Cohorts[name]
		groups, err := groups(spec.GetResourceGroups())
		if err != nil {
			return cfg, &admitcore.ConfigError{Kind: "Cohort", Name: name, Field: err.field, Err: err.err}
		}
		cfg.Cohorts = append(cfg.Cohorts, admitcore.Cohort{Name: name, Parent: spec.GetParent(), ResourceGroups: groups})
	}
	for _, name := range slices.Sorted(maps.Keys(defs.ClusterQueues)) {
		spec := defs.ClusterQueues[name]
		groups, err := groups(spec.GetResourceGroups())
		if err != nil {
			return cfg, &admitcore.ConfigError{Kind: "ClusterQueue", Name: name, Field: err.field, Err: err.err}
		}
		p := spec.GetPreemption()
		cfg.ClusterQueues = append(cfg.ClusterQueues, admitcore.ClusterQueue{Name: name, Cohort: spec.GetCohort(),
			ResourceGroups: groups, QueueingStrategy: admitcore.QueueingStrategy(spec.GetQueueingStrategy()),
			Preemption: admitcore.Preemption{WithinClusterQueue: admitcore.PreemptionPolicy(p.GetWithinClusterQueue()),
				ReclaimWithinCohort: admitcore.PreemptionPolicy(p.GetReclaimWithinCohort()), MinPriorityGap: int(p.GetMinPriorityGap())}})
	}
	return cfg, nil
}

type fieldError struct {
	field string
	err   error
}

func groups(in []*quotav1.ResourceGroup) ([]admitcore.ResourceGroup, *fieldError) {
	out := make([]admitcore.ResourceGroup, len(in))
	for gi, g := range in {
		rg := admitcore.ResourceGroup{CoveredResources: slices.Clone(g.GetCoveredResources())}
		for fi, f := range g.GetFlavors() {
			fq := admitcore.FlavorQuotas{Name: f.GetName()}
			for ri, r := range f.GetResources() {
				at := fmt.Sprintf("resourceGroups[%d].flavors[%d].resources[%d]", gi, fi, ri)
				nominal, err := quantity.Milli(r.GetNominalQuota())
				if err != nil {
					return nil, &fieldError{at + ".nominalQuota", err}
				}
				rq := admitcore.ResourceQuota{Name: r.GetName(), NominalQuota: nominal}
				if r.BorrowingLimit != nil {
					v, err := quantity.Milli(r.GetBorrowingLimit())
					if err != nil {
						return nil, &fieldError{at + ".borrowingLimit", err}
					}
					rq.BorrowingLimit = &v
				}
				if r.LendingLimit != nil {
					v, err := quantity.Milli(r.GetLendingLimit())
					if err != nil {
						return nil, &fieldError{at + ".lendingLimit", err}
					}
					rq.LendingLimit = &v
				}
				fq.Resources = append(fq.Resources, rq)
			}
			rg.Flavors = append(rg.Flavors, fq)
		}
		out[gi] = rg
	}
	return out, nil
}

// Reconfigure implements app.Core.
func (c *Core) Reconfigure(defs app.Definitions) error {
	cfg, err := Config(defs)
	if err != nil {
		return err
	}
	return c.s.Reconfigure(cfg)
}

// Enqueue implements app.Core.
func (c *Core) Enqueue(w app.Workload) error {
	if err := c.s.Enqueue(admitcore.Workload{ID: w.ID, ClusterQueue: w.ClusterQueue, Priority: w.Priority,
		Created: w.Created, Requests: w.Requests}); err != nil {
		return err
	}
	c.prio[w.ID] = w.Priority
	return nil
}

// Admit implements app.Core.
func (c *Core) Admit(id string, flavors map[string]string) error {
	return c.s.Admit(id, admitcore.Assignment{Flavors: flavors})
}

// Preempt implements app.Core.
func (c *Core) Preempt(victim, preemptor string) error { return c.s.Preempt(victim, preemptor) }

// Remove implements app.Core.
func (c *Core) Remove(id string) error {
	if err := c.s.Remove(id); err != nil {
		return err
	}
	delete(c.prio, id)
	return nil
}

// Schedule implements app.Core.
func (c *Core) Schedule(now time.Time, max int) []app.Decision {
	ds := c.s.Schedule(now, max)
	out := make([]app.Decision, 0, len(ds))
	for _, d := range ds {
		switch d.Kind {
		case admitcore.DecideAdmit:
			out = append(out, app.Decision{Kind: app.DecisionAdmit, Workload: d.ID, Flavors: d.Assignment.Flavors,
				Borrowing: d.Assignment.Borrowing})
		case admitcore.DecidePreempt:
			out = append(out, app.Decision{Kind: app.DecisionPreempt, Workload: d.Preemptor, Victim: d.Victim,
				Reason: fmt.Sprintf("preempted to admit %s (priority %d over %d)", d.Preemptor, c.prio[d.Preemptor], c.prio[d.Victim])})
		}
	}
	return out
}

// Explain implements app.Core.
func (c *Core) Explain(id string) (app.Explanation, error) {
	e, err := c.s.Explain(id)
	if err != nil {
		return app.Explanation{}, err
	}
	// The sentence writes quantities as the shortages below do, so the
	// two say the same numbers (docs/api/quota.md#explaining-a-wait).
	out := app.Explanation{ClusterQueue: e.ClusterQueue, Reason: e.Sentence(quantity.Format), BlockedBy: e.BlockedBy,
		WaitingFor: e.WaitingFor, Flavors: e.Flavors}
	switch e.Reason {
	case admitcore.ReasonAdmitted:
		out.State = app.StateAdmitted
	case admitcore.ReasonEvicting:
		out.State = app.StateEvicting
	default:
		out.State, out.Position = app.StatePending, e.Position+1
	}
	for _, sh := range e.Shortages {
		out.Shortages = append(out.Shortages, &quotav1.ResourceShortage{Flavor: sh.Flavor, Resource: sh.Resource,
			Requested: quantity.Format(sh.Requested), Available: quantity.Format(sh.Available),
			NominalQuota: quantity.Format(sh.Nominal)})
	}
	return out, nil
}

// ClusterQueueUsage implements app.Core.
func (c *Core) ClusterQueueUsage(name string) ([]*quotav1.FlavorUsage, error) {
	u, err := c.s.ClusterQueueUsage(name)
	if err != nil {
		return nil, err
	}
	return flavorUsage(u), nil
}

// CohortUsage implements app.Core.
func (c *Core) CohortUsage(name string) ([]*quotav1.FlavorUsage, error) {
	u, err := c.s.CohortUsage(name)
	if err != nil {
		return nil, err
	}
	return flavorUsage(u), nil
}

// flavorUsage groups a usage by flavor, in the core's order.
func flavorUsage(u admitcore.Usage) []*quotav1.FlavorUsage {
	var out []*quotav1.FlavorUsage
	byName := map[string]*quotav1.FlavorUsage{}
	for _, r := range u.Resources {
		f := byName[r.Flavor]
		if f == nil {
			f = &quotav1.FlavorUsage{Name: r.Flavor}
			byName[r.Flavor] = f
			out = append(out, f)
		}
		f.Resources = append(f.Resources, &quotav1.ResourceUsage{Name: r.Resource, Total: quantity.Format(r.Used),
			Borrowed: quantity.Format(r.Borrowed), NominalQuota: quantity.Format(r.Nominal),
			Available: quantity.Format(r.Available)})
	}
	return out
}
