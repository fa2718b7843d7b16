package admitcore

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestConfigValidation(t *testing.T) {
	ok := cpuCQ("q", "", 1)
	inCohort := func(c ClusterQueue) Config {
		return Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{c}}
	}
	tests := []struct {
		name  string
		cfg   Config
		want  error
		field string
	}{
		{"empty cohort name", Config{Cohorts: []Cohort{{}}}, ErrEmptyName, "cohorts[0].name"},
		{"empty queue name", Config{ClusterQueues: []ClusterQueue{cpuCQ("", "", 1)}}, ErrEmptyName, "clusterQueues[0].name"},
		{"duplicate cohort", Config{Cohorts: []Cohort{{Name: "c"}, {Name: "c"}}}, ErrDuplicateName, ""},
		{"duplicate queue", Config{ClusterQueues: []ClusterQueue{ok, ok}}, ErrDuplicateName, ""},
		{"cycle", Config{Cohorts: []Cohort{{Name: "a", Parent: "b"}, {Name: "b", Parent: "a"}}}, ErrCohortCycle, "parent"},
		{"self parent", Config{Cohorts: []Cohort{{Name: "a", Parent: "a"}}}, ErrCohortCycle, "parent"},
		{"negative nominal", Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", -1)}}, ErrInvalidQuantity,
			"resourceGroups[0].flavors[0].resources[0].nominalQuota"},
		{"nominal too large", Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", MaxQuantity+1)}}, ErrInvalidQuantity,
			"resourceGroups[0].flavors[0].resources[0].nominalQuota"},
		{"negative borrowing limit", inCohort(cpuCQ("q", "c", 1, i64(-1))), ErrInvalidQuantity,
			"resourceGroups[0].flavors[0].resources[0].borrowingLimit"},
		{"negative lending limit", inCohort(cpuCQ("q", "c", 1, nil, i64(-1))), ErrInvalidQuantity,
			"resourceGroups[0].flavors[0].resources[0].lendingLimit"},
		{"borrowing limit without cohort", Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 1, i64(1))}}, ErrLimitWithoutCohort,
			"resourceGroups[0].flavors[0].resources[0].borrowingLimit"},
		{"lending limit without cohort", Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 1, nil, i64(1))}}, ErrLimitWithoutCohort,
			"resourceGroups[0].flavors[0].resources[0].lendingLimit"},
		{"limit on a root cohort", Config{Cohorts: []Cohort{{Name: "c", ResourceGroups: []ResourceGroup{
			grp(flavor("f", rq("cpu", 1, i64(1))))}}}}, ErrLimitWithoutCohort,
			"resourceGroups[0].flavors[0].resources[0].borrowingLimit"},
		{"lending above nominal", inCohort(cpuCQ("q", "c", 1, nil, i64(2))), ErrLendingAboveNominal,
			"resourceGroups[0].flavors[0].resources[0].lendingLimit"},
		{"queueing strategy", Config{ClusterQueues: []ClusterQueue{{Name: "q", QueueingStrategy: "LIFO"}}}, ErrInvalidPolicy, "queueingStrategy"},
		{"withinClusterQueue Any", Config{ClusterQueues: []ClusterQueue{withPreemption(ok, Any, "", 0)}}, ErrInvalidPolicy,
			"preemption.withinClusterQueue"},
		{"reclaimWithinCohort LowerOrNewerEqualPriority", Config{ClusterQueues: []ClusterQueue{
			withPreemption(ok, "", LowerOrNewerEqualPriority, 0)}}, ErrInvalidPolicy, "preemption.reclaimWithinCohort"},
		{"negative gap", Config{ClusterQueues: []ClusterQueue{withPreemption(ok, LowerPriority, "", -1)}}, ErrInvalidPolicy,
			"preemption.minPriorityGap"},
		{"no covered resources", Config{ClusterQueues: []ClusterQueue{cq("q", "", ResourceGroup{})}}, ErrInvalidResourceGroup,
			"resourceGroups[0].coveredResources"},
		{"empty covered resource", Config{ClusterQueues: []ClusterQueue{cq("q", "", grp(flavor("f", rq("", 1))))}}, ErrEmptyName,
			"resourceGroups[0].coveredResources[0]"},
		{"resource in two groups", Config{ClusterQueues: []ClusterQueue{cq("q", "",
			grp(flavor("f", rq("cpu", 1))), grp(flavor("g", rq("cpu", 1))))}}, ErrInvalidResourceGroup,
			"resourceGroups[1].coveredResources[0]"},
		{"no flavors", Config{ClusterQueues: []ClusterQueue{cq("q", "", ResourceGroup{CoveredResources: []string{"cpu"}})}},
			ErrInvalidResourceGroup, "resourceGroups[0].flavors"},
		{"empty flavor name", Config{ClusterQueues: []ClusterQueue{cq("q", "", grp(flavor("", rq("cpu", 1))))}}, ErrEmptyName,
			"resourceGroups[0].flavors[0].name"},
		{"flavor twice", Config{ClusterQueues: []ClusterQueue{cq("q", "",
			grp(flavor("f", rq("cpu", 1)), flavor("f", rq("cpu", 1))))}}, ErrInvalidResourceGroup,
			"resourceGroups[0].flavors[1].name"},
		{"flavor resources differ from covered", Config{ClusterQueues: []ClusterQueue{cq("q", "",
			grp(flavor("f", rq("cpu", 1)), flavor("g", rq("memory", 1))))}}, ErrInvalidResourceGroup,
			"resourceGroups[0].flavors[1].resources"},
		{"cohort group", Config{Cohorts: []Cohort{{Name: "c", ResourceGroups: []ResourceGroup{grp(flavor("f", rq("cpu", -3)))}}}},
			ErrInvalidQuantity, "resourceGroups[0].flavors[0].resources[0].nominalQuota"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			var ce *ConfigError
			if !errors.Is(err, tt.want) || !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("New = %v, want %v at field %q", err, tt.want, tt.field)
			}
			// Reconfigure refuses the same config and changes nothing.
			s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 5)}})
			admitNow(t, s, wl("w", "q", 0, 0, cpu(2)))
			before := fingerprint(s)
			if err := s.Reconfigure(tt.cfg); !errors.Is(err, tt.want) {
				t.Fatalf("Reconfigure = %v, want %v", err, tt.want)
			}
			if got := fingerprint(s); got != before {
				t.Errorf("state changed:\n%s\nwant\n%s", got, before)
			}
		})
	}
}

// fingerprint renders everything observable about s.
func fingerprint(s *State) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(s.queues)) {
		q := s.queues[name]
		fmt.Fprintf(&b, "queue %s configured=%v pending=", name, q.node != nil)
		for _, w := range q.pending {
			fmt.Fprintf(&b, "%s,", w.ID)
		}
		b.WriteString(" admitted=")
		for _, id := range slices.Sorted(maps.Keys(q.admitted)) {
			w := q.admitted[id]
			fmt.Fprintf(&b, "%s%v evicting=%v,", id, w.flavors, w.evicting)
		}
		if q.node != nil {
			u, _ := s.ClusterQueueUsage(name)
			fmt.Fprintf(&b, " usage=%s", formatUsage(u))
		}
		b.WriteString("\n")
	}
	for _, name := range slices.Sorted(maps.Keys(s.cohorts)) {
		u, _ := s.CohortUsage(name)
		fmt.Fprintf(&b, "cohort %s usage=%s\n", name, formatUsage(u))
	}
	for _, id := range slices.Sorted(maps.Keys(s.workloads)) {
		w := s.workloads[id]
		fmt.Fprintf(&b, "wl %s admitted=%v victims=%v for=%q\n", id, w.admitted, w.victims, w.evictingFor)
	}
	return b.String()
}

func TestReconfigureRefusesRemovingBusyQueue(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 5), cpuCQ("r", "", 5)}})
	admitNow(t, s, wl("w", "q", 0, 0, cpu(2)))
	before := fingerprint(s)
	err := s.Reconfigure(Config{ClusterQueues: []ClusterQueue{cpuCQ("r", "", 5)}})
	var ce *ConfigError
	if !errors.Is(err, ErrQueueInUse) || !errors.As(err, &ce) || ce.Name != "q" {
		t.Fatalf("Reconfigure = %v, want ErrQueueInUse for q", err)
	}
	if fingerprint(s) != before {
		t.Error("state changed")
	}
}

func TestReconfigure(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 4), cpuCQ("gone", "", 4)}})
	admitNow(t, s, wl("running", "q", 0, 0, cpu(3)))
	mustEnqueue(t, s, wl("waiting", "gone", 0, 1, cpu(8)))

	// A WorkGroup starts: queue "new" appears, "gone" disappears, q shrinks
	// below its usage.
	if err := s.Reconfigure(Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 2), cpuCQ("new", "", 1)}}); err != nil {
		t.Fatal(err)
	}
	u, _ := s.ClusterQueueUsage("q")
	if r := u.Resources[0]; r.Used != 3 || r.Available != 0 || u.Admitted != 1 {
		t.Errorf("q usage %+v, want 3 used, nothing available", u)
	}
	if e, _ := s.Explain("waiting"); e.Reason != ReasonQueueNotConfigured || e.Position != 0 {
		t.Errorf("Explain(waiting) = %+v", e)
	}
	if err := s.Enqueue(wl("x", "gone", 0, 2, cpu(1))); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("Enqueue to removed queue = %v", err)
	}
	if _, err := s.ClusterQueueUsage("gone"); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("ClusterQueueUsage(gone) = %v", err)
	}
	mustEnqueue(t, s, wl("small", "q", 0, 3, cpu(1)), wl("n1", "new", 0, 4, cpu(1)))
	ds := s.Schedule(t0, 10)
	if got := admittedIDs(ds); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("admitted %v, want [n1] (q is over-admitted)", got)
	}
	apply(t, s, ds)
	// The queue comes back, bigger: its pending workload is admitted.
	if err := s.Reconfigure(Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 2), cpuCQ("new", "", 1), cpuCQ("gone", "", 8)}}); err != nil {
		t.Fatal(err)
	}
	ds = s.Schedule(t0, 10)
	if got := admittedIDs(ds); !slices.Equal(got, []string{"waiting"}) {
		t.Errorf("admitted %v, want [waiting]", got)
	}
	apply(t, s, ds)
	// Releasing the over-admitted workload makes room again.
	if err := s.Remove("running"); err != nil {
		t.Fatal(err)
	}
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"small"}) {
		t.Errorf("admitted %v, want [small]", got)
	}
}

func TestMutationErrors(t *testing.T) {
	machine := cq("m", "", grp(
		flavor("small", rq("cpu", 8), rq("memory", 4)),
		flavor("large", rq("cpu", 8), rq("memory", 32))))
	setup := func(t *testing.T) *State {
		s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 4), machine}})
		admitNow(t, s, wl("admitted", "q", 0, 0, cpu(3)), wl("evicting", "q", 0, 1, cpu(1)))
		mustEnqueue(t, s, wl("pending", "q", 5, 2, cpu(2)), wl("mp", "m", 0, 3, map[string]int64{"cpu": 1, "memory": 1}))
		if err := s.Preempt("evicting", "pending"); err != nil {
			t.Fatal(err)
		}
		return s
	}
	flv := func(kv ...string) Assignment {
		a := Assignment{Flavors: map[string]string{}}
		for i := 0; i < len(kv); i += 2 {
			a.Flavors[kv[i]] = kv[i+1]
		}
		return a
	}
	tests := []struct {
		name string
		op   func(*State) error
		want error
	}{
		{"enqueue without id", func(s *State) error { return s.Enqueue(wl("", "q", 0, 0, cpu(1))) }, ErrInvalidWorkload},
		{"enqueue without queue", func(s *State) error { return s.Enqueue(wl("x", "", 0, 0, cpu(1))) }, ErrInvalidWorkload},
		{"enqueue negative request", func(s *State) error { return s.Enqueue(wl("x", "q", 0, 0, cpu(-1))) }, ErrInvalidWorkload},
		{"enqueue huge request", func(s *State) error { return s.Enqueue(wl("x", "q", 0, 0, cpu(MaxQuantity+1))) }, ErrInvalidWorkload},
		{"enqueue empty resource", func(s *State) error { return s.Enqueue(wl("x", "q", 0, 0, map[string]int64{"": 1})) }, ErrInvalidWorkload},
		{"enqueue duplicate", func(s *State) error { return s.Enqueue(wl("admitted", "q", 0, 0, cpu(1))) }, ErrDuplicate},
		{"enqueue unknown queue", func(s *State) error { return s.Enqueue(wl("x", "nope", 0, 0, cpu(1))) }, ErrUnknownQueue},
		{"admit unknown", func(s *State) error { return s.Admit("nope", flv("cpu", "default")) }, ErrUnknownWorkload},
		{"admit admitted", func(s *State) error { return s.Admit("admitted", flv("cpu", "default")) }, ErrNotPending},
		{"admit without flavors", func(s *State) error { return s.Admit("pending", flv()) }, ErrInvalidAssignment},
		{"admit other resource", func(s *State) error { return s.Admit("pending", flv("gpu", "default")) }, ErrInvalidAssignment},
		{"admit unknown flavor", func(s *State) error { return s.Admit("pending", flv("cpu", "spot")) }, ErrInvalidAssignment},
		{"admit flavor of another queue", func(s *State) error { return s.Admit("pending", flv("cpu", "large")) }, ErrInvalidAssignment},
		{"admit split group", func(s *State) error { return s.Admit("mp", flv("cpu", "small", "memory", "large")) }, ErrInvalidAssignment},
		{"admit over quota", func(s *State) error { return s.Admit("pending", flv("cpu", "default")) }, ErrQuotaExceeded},
		{"preempt unknown victim", func(s *State) error { return s.Preempt("nope", "pending") }, ErrUnknownWorkload},
		{"preempt for unknown", func(s *State) error { return s.Preempt("admitted", "nope") }, ErrUnknownWorkload},
		{"preempt pending victim", func(s *State) error { return s.Preempt("mp", "pending") }, ErrNotAdmitted},
		{"preempt evicting victim", func(s *State) error { return s.Preempt("evicting", "pending") }, ErrAlreadyEvicting},
		{"preempt for admitted", func(s *State) error { return s.Preempt("admitted", "evicting") }, ErrNotPending},
		{"evict unknown", func(s *State) error { return s.Evict("nope") }, ErrUnknownWorkload},
		{"evict pending", func(s *State) error { return s.Evict("pending") }, ErrNotAdmitted},
		{"remove unknown", func(s *State) error { return s.Remove("nope") }, ErrUnknownWorkload},
		{"explain unknown", func(s *State) error { _, err := s.Explain("nope"); return err }, ErrUnknownWorkload},
		{"queue usage unknown", func(s *State) error { _, err := s.ClusterQueueUsage("nope"); return err }, ErrUnknownQueue},
		{"cohort usage unknown", func(s *State) error { _, err := s.CohortUsage("nope"); return err }, ErrUnknownCohort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup(t)
			before := fingerprint(s)
			if err := tt.op(s); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := fingerprint(s); got != before {
				t.Errorf("state changed:\n%s\nwant\n%s", got, before)
			}
		})
	}
}

func TestQuotaErrorDetails(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 4)}})
	mustEnqueue(t, s, wl("w", "q", 0, 0, cpu(5)))
	err := s.Admit("w", Assignment{Flavors: map[string]string{"cpu": "default"}})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Requested != 5 || qe.Available != 4 || qe.Flavor != "default" || qe.Resource != "cpu" {
		t.Fatalf("Admit = %#v", err)
	}
}

func TestAdmitOfRemovedQueue(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 4)}})
	mustEnqueue(t, s, wl("w", "q", 0, 0, cpu(1)))
	if err := s.Reconfigure(Config{}); err != nil {
		t.Fatal(err)
	}
	before := fingerprint(s)
	if err := s.Admit("w", Assignment{Flavors: map[string]string{"cpu": "default"}}); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("Admit = %v, want ErrUnknownQueue", err)
	}
	if fingerprint(s) != before {
		t.Error("state changed")
	}
	if ds := s.Schedule(t0, 10); len(ds) != 0 {
		t.Errorf("decisions for an unconfigured queue: %+v", ds)
	}
}

func TestRemoveAndEvictFreeUsage(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 4)}})
	admitNow(t, s, wl("a", "q", 0, 0, cpu(4)))
	mustEnqueue(t, s, wl("b", "q", 0, 1, cpu(4)))
	if ds := s.Schedule(t0, 10); len(ds) != 0 {
		t.Fatalf("decisions on a full queue: %+v", ds)
	}
	if err := s.Evict("a"); err != nil {
		t.Fatal(err)
	}
	// a is pending again, ahead of b (older).
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("admitted %v, want [a]", got)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("admitted %v, want [b]", got)
	}
	if err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	u, _ := s.ClusterQueueUsage("q")
	if u.Pending != 0 || u.Admitted != 0 {
		t.Errorf("usage %+v, want empty", u)
	}
}

func formatUsage(u Usage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pending=%d admitted=%d", u.Pending, u.Admitted)
	for _, r := range u.Resources {
		limit := func(p *int64) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprint(*p)
		}
		fmt.Fprintf(&b, " [%s/%s nominal=%d subtree=%d used=%d borrowed=%d lent=%d available=%d bl=%s ll=%s]",
			r.Flavor, r.Resource, r.Nominal, r.Subtree, r.Used, r.Borrowed, r.Lent, r.Available, limit(r.BorrowingLimit), limit(r.LendingLimit))
	}
	return b.String()
}
