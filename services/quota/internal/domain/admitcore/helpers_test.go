package admitcore

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func i64(v int64) *int64 { return &v }

// rq is a resource quota; opts set borrowingLimit then lendingLimit (nil
// to skip).
func rq(name string, nominal int64, limits ...*int64) ResourceQuota {
	q := ResourceQuota{Name: name, NominalQuota: nominal}
	if len(limits) > 0 {
		q.BorrowingLimit = limits[0]
	}
	if len(limits) > 1 {
		q.LendingLimit = limits[1]
	}
	return q
}

func flavor(name string, res ...ResourceQuota) FlavorQuotas {
	return FlavorQuotas{Name: name, Resources: res}
}

// grp is a resource group whose covered resources are those of its first
// flavor.
func grp(flavors ...FlavorQuotas) ResourceGroup {
	g := ResourceGroup{Flavors: flavors}
	for _, r := range flavors[0].Resources {
		g.CoveredResources = append(g.CoveredResources, r.Name)
	}
	return g
}

func cq(name, cohort string, groups ...ResourceGroup) ClusterQueue {
	return ClusterQueue{Name: name, Cohort: cohort, ResourceGroups: groups}
}

// cpuCQ is a ClusterQueue with one flavor "default" of cpu.
func cpuCQ(name, cohort string, nominal int64, limits ...*int64) ClusterQueue {
	return cq(name, cohort, grp(flavor("default", rq("cpu", nominal, limits...))))
}

// wl is a workload created i seconds after t0.
func wl(id, queue string, prio, i int, reqs map[string]int64) Workload {
	return Workload{ID: id, ClusterQueue: queue, Priority: prio, Created: t0.Add(time.Duration(i) * time.Second), Requests: reqs}
}

func cpu(v int64) map[string]int64 { return map[string]int64{"cpu": v} }

func mustNew(t testing.TB, cfg Config) *State {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func mustEnqueue(t testing.TB, s *State, ws ...Workload) {
	t.Helper()
	for _, w := range ws {
		if err := s.Enqueue(w); err != nil {
			t.Fatalf("Enqueue(%s): %v", w.ID, err)
		}
	}
}

// admitNow enqueues ws and admits each through Schedule, failing when
// Schedule does not admit it.
func admitNow(t testing.TB, s *State, ws ...Workload) {
	t.Helper()
	for _, w := range ws {
		mustEnqueue(t, s, w)
		ok := false
		for _, d := range s.Schedule(t0, 1000) {
			if d.Kind == DecideAdmit && d.ID == w.ID {
				if err := s.Admit(d.ID, d.Assignment); err != nil {
					t.Fatalf("Admit(%s): %v", d.ID, err)
				}
				ok = true
			}
		}
		if !ok {
			t.Fatalf("%s was not admitted", w.ID)
		}
	}
}

// apply applies decisions as facts: Admit, and Preempt then Evict.
func apply(t testing.TB, s *State, ds []Decision) {
	t.Helper()
	for _, d := range ds {
		var err error
		switch d.Kind {
		case DecideAdmit:
			err = s.Admit(d.ID, d.Assignment)
		case DecidePreempt:
			if err = s.Preempt(d.Victim, d.Preemptor); err == nil {
				err = s.Evict(d.Victim)
			}
		}
		if err != nil {
			t.Fatalf("apply %+v: %v", d, err)
		}
	}
}

func admittedIDs(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		if d.Kind == DecideAdmit {
			out = append(out, d.ID)
		}
	}
	slices.Sort(out)
	return out
}

func victimIDs(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		if d.Kind == DecidePreempt {
			out = append(out, d.Victim)
		}
	}
	slices.Sort(out)
	return out
}
