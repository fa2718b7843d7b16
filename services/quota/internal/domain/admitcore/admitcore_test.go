package admitcore

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"
)

// maxAdmissible is the largest cpu request Schedule admits on an empty
// state for queue: want admits, want+1 does not.
func checkMaxAdmissible(t *testing.T, cfg Config, queue string, want int64) {
	t.Helper()
	for _, c := range []struct {
		req   int64
		admit bool
	}{{want, true}, {want + 1, false}} {
		s := mustNew(t, cfg)
		mustEnqueue(t, s, wl("w", queue, 0, 0, cpu(c.req)))
		got := admittedIDs(s.Schedule(t0, 10))
		if (len(got) == 1) != c.admit {
			t.Errorf("%s requesting %d: admitted = %v, want %v", queue, c.req, got, c.admit)
		}
	}
}

func TestQuotaArithmetic(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		queue string
		want  int64
	}{
		{
			// Kueue's "Borrowing and lending limits" example: team-b idle.
			name: "borrow everything the cohort has",
			cfg: Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{
				cpuCQ("team-a", "c", 9), cpuCQ("team-b", "c", 12)}},
			queue: "team-a", want: 21,
		},
		{
			name: "team-a borrowingLimit 1",
			cfg: Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{
				cpuCQ("team-a", "c", 9, i64(1)), cpuCQ("team-b", "c", 12)}},
			queue: "team-a", want: 10,
		},
		{
			name: "team-b lendingLimit 1",
			cfg: Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{
				cpuCQ("team-a", "c", 9), cpuCQ("team-b", "c", 12, nil, i64(1))}},
			queue: "team-a", want: 10,
		},
		{
			name: "team-b keeps its guaranteed quota",
			cfg: Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{
				cpuCQ("team-a", "c", 9, nil, i64(1)), cpuCQ("team-b", "c", 12)}},
			queue: "team-b", want: 13,
		},
		{
			name:  "no cohort: nominal only",
			cfg:   Config{ClusterQueues: []ClusterQueue{cpuCQ("solo", "", 7)}},
			queue: "solo", want: 7,
		},
		// Hierarchical: org (own quota 10) ⊃ dept (own 2, lends 2) ⊃ a(5), b(5);
		// c(4, lends 1) directly in org.
		{
			name:  "hierarchy: a gets dept, org and what c lends",
			cfg:   hierarchy(),
			queue: "a", want: 5 + 5 + 2 + 10 + 1,
		},
		{
			name:  "hierarchy: c gets org and what dept lends",
			cfg:   hierarchy(),
			queue: "c", want: 4 + 10 + 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkMaxAdmissible(t, tt.cfg, tt.queue, tt.want) })
	}
}

func hierarchy() Config {
	return Config{
		Cohorts: []Cohort{
			{Name: "org", ResourceGroups: []ResourceGroup{grp(flavor("default", rq("cpu", 10)))}},
			{Name: "dept", Parent: "org", ResourceGroups: []ResourceGroup{grp(flavor("default", rq("cpu", 2, nil, i64(2))))}},
		},
		ClusterQueues: []ClusterQueue{
			cpuCQ("a", "dept", 5), cpuCQ("b", "dept", 5), cpuCQ("c", "org", 4, nil, i64(1)),
		},
	}
}

func TestHierarchyUsageFlowsUp(t *testing.T) {
	s := mustNew(t, hierarchy())
	// a uses 12: its 5, b's 5 and dept's 2.
	admitNow(t, s, wl("a1", "a", 0, 0, cpu(12)))
	org, _ := s.CohortUsage("org")
	dept, _ := s.CohortUsage("dept")
	if got := org.Resources[0].Used; got != 2 {
		t.Errorf("org used = %d, want 2 (beyond dept's guaranteed 10, its lendable 2 counts in org)", got)
	}
	if got := dept.Resources[0].Used; got != 12 {
		t.Errorf("dept used = %d, want 12", got)
	}
	// 11 more: 10 of org's own and 1 lent by c; c keeps its guaranteed 3.
	admitNow(t, s, wl("a2", "a", 0, 1, cpu(11)))
	org, _ = s.CohortUsage("org")
	if got := org.Resources[0].Used; got != 13 {
		t.Errorf("org used = %d, want 13", got)
	}
	checkMaxAdmissible(t, hierarchy(), "c", 16)
	mustEnqueue(t, s, wl("c1", "c", 0, 2, cpu(4)))
	if got := admittedIDs(s.Schedule(t0, 10)); len(got) != 0 {
		t.Errorf("c admitted %v with only 3 guaranteed left", got)
	}
	mustEnqueue(t, s, wl("c2", "c", 0, 3, cpu(3)))
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"c2"}) {
		t.Errorf("admitted %v, want [c2]", got)
	}
}

func TestQueueingStrategy(t *testing.T) {
	tests := []struct {
		name     string
		strategy QueueingStrategy
		want     []string
	}{
		{"StrictFIFO blocks behind a head that does not fit", StrictFIFO, nil},
		{"BestEffortFIFO lets a smaller workload pass", BestEffortFIFO, []string{"small"}},
		{"default is BestEffortFIFO", "", []string{"small"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := cpuCQ("q", "", 10)
			q.QueueingStrategy = tt.strategy
			s := mustNew(t, Config{ClusterQueues: []ClusterQueue{q}})
			admitNow(t, s, wl("running", "q", 0, 0, cpu(6)))
			mustEnqueue(t, s, wl("big", "q", 0, 1, cpu(8)), wl("small", "q", 0, 2, cpu(2)))
			got := admittedIDs(s.Schedule(t0, 10))
			if !slices.Equal(got, tt.want) {
				t.Errorf("admitted %v, want %v", got, tt.want)
			}
			e, err := s.Explain("small")
			if err != nil {
				t.Fatal(err)
			}
			wantReason := ReasonFits
			if tt.strategy == StrictFIFO {
				wantReason = ReasonBlockedByHead
			}
			if e.Reason != wantReason || e.Position != 1 {
				t.Errorf("Explain(small) = %+v, want %s at position 1", e, wantReason)
			}
		})
	}
}

func TestQueueOrder(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 2)}})
	mustEnqueue(t, s,
		wl("old-low", "q", 1, 0, cpu(1)),
		wl("new-high", "q", 5, 2, cpu(1)),
		wl("old-high", "q", 5, 1, cpu(1)),
		wl("b-same", "q", 5, 1, cpu(1)),
	)
	// Priority desc, creation asc, id asc: b-same and old-high tie on time.
	got := admittedIDs(s.Schedule(t0, 10))
	if want := []string{"b-same", "old-high"}; !slices.Equal(got, want) {
		t.Errorf("admitted %v, want %v", got, want)
	}
	if got := s.Schedule(t0, 1); len(got) != 1 || got[0].ID != "b-same" {
		t.Errorf("Schedule(max 1) = %+v, want only b-same", got)
	}
}

func TestFlavorAssignment(t *testing.T) {
	twoFlavors := cq("q", "", grp(flavor("on-demand", rq("cpu", 4)), flavor("spot", rq("cpu", 10))))
	machine := cq("m", "", grp(
		flavor("small", rq("cpu", 8), rq("memory", 4)),
		flavor("large", rq("cpu", 8), rq("memory", 32))))
	tests := []struct {
		name     string
		cq       ClusterQueue
		running  []Workload
		w        Workload
		want     map[string]string
		borrows  bool
		admitted bool
	}{
		{name: "first flavor when it fits", cq: twoFlavors, w: wl("w", "q", 0, 9, cpu(3)),
			want: map[string]string{"cpu": "on-demand"}, admitted: true},
		{name: "second flavor when the first is too small", cq: twoFlavors, w: wl("w", "q", 0, 9, cpu(6)),
			want: map[string]string{"cpu": "spot"}, admitted: true},
		{name: "second flavor when the first is used", cq: twoFlavors,
			running: []Workload{wl("r", "q", 0, 0, cpu(3))}, w: wl("w", "q", 0, 9, cpu(2)),
			want: map[string]string{"cpu": "spot"}, admitted: true},
		{name: "a group's resources come from one flavor", cq: machine,
			w:    wl("w", "m", 0, 9, map[string]int64{"cpu": 2, "memory": 16}),
			want: map[string]string{"cpu": "large", "memory": "large"}, admitted: true},
		{name: "no flavor fits", cq: twoFlavors, w: wl("w", "q", 0, 9, cpu(11))},
		{name: "resource without quota", cq: twoFlavors, w: wl("w", "q", 0, 9, map[string]int64{"gpu": 1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, Config{ClusterQueues: []ClusterQueue{tt.cq}})
			admitNow(t, s, tt.running...)
			mustEnqueue(t, s, tt.w)
			ds := s.Schedule(t0, 10)
			if !tt.admitted {
				if len(ds) != 0 {
					t.Fatalf("decisions %+v, want none", ds)
				}
				e, _ := s.Explain("w")
				if e.Reason != ReasonInsufficientQuota || len(e.Shortages) == 0 {
					t.Errorf("Explain = %+v, want InsufficientQuota with shortages", e)
				}
				return
			}
			if len(ds) != 1 || ds[0].Kind != DecideAdmit {
				t.Fatalf("decisions %+v, want one admission", ds)
			}
			if got := ds[0].Assignment; !mapsEqual(got.Flavors, tt.want) || got.Borrowing != tt.borrows {
				t.Errorf("assignment %+v, want %v borrowing=%v", got, tt.want, tt.borrows)
			}
			apply(t, s, ds)
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestBorrowingFlagAndOrdering(t *testing.T) {
	// Both heads want the cohort's last 4; the one not borrowing goes first
	// even though the other has a higher priority.
	s := mustNew(t, Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{
		cpuCQ("a", "c", 6), cpuCQ("b", "c", 6)}})
	admitNow(t, s, wl("a0", "a", 0, 0, cpu(8)))
	mustEnqueue(t, s, wl("a1", "a", 9, 1, cpu(4)), wl("b1", "b", 0, 2, cpu(4)))
	ds := s.Schedule(t0, 10)
	if got := admittedIDs(ds); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("admitted %v, want [b1]", got)
	}
	if ds[0].Assignment.Borrowing {
		t.Errorf("b1 assignment borrows: %+v", ds[0].Assignment)
	}
}

func TestUsageViews(t *testing.T) {
	s := mustNew(t, Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{
		cpuCQ("team-a", "c", 9, i64(5)), cpuCQ("team-b", "c", 12, nil, i64(4))}})
	admitNow(t, s, wl("a1", "team-a", 0, 0, cpu(7)), wl("a2", "team-a", 0, 1, cpu(5)))
	mustEnqueue(t, s, wl("a3", "team-a", 0, 2, cpu(5)), wl("b1", "team-b", 0, 3, cpu(20)))
	tests := []struct {
		name string
		get  func() (Usage, error)
		want Usage
	}{
		{"team-a borrows 3 of team-b's lendable 4", func() (Usage, error) { return s.ClusterQueueUsage("team-a") }, Usage{
			Name: "team-a", Parent: "c", Pending: 1, Admitted: 2,
			Resources: []ResourceUsage{{Flavor: "default", Resource: "cpu", Nominal: 9, Subtree: 9, Used: 12, Borrowed: 3,
				Available: 1, BorrowingLimit: i64(5)}},
		}},
		{"team-b lends 3 and keeps 8 guaranteed", func() (Usage, error) { return s.ClusterQueueUsage("team-b") }, Usage{
			Name: "team-b", Parent: "c", Pending: 1,
			Resources: []ResourceUsage{{Flavor: "default", Resource: "cpu", Nominal: 12, Subtree: 12, Lent: 3,
				Available: 9, LendingLimit: i64(4)}},
		}},
		{"cohort counts usage beyond guaranteed quota", func() (Usage, error) { return s.CohortUsage("c") }, Usage{
			Name: "c", Pending: 2, Admitted: 2,
			Resources: []ResourceUsage{{Flavor: "default", Resource: "cpu", Subtree: 13, Used: 12, Available: 1}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.get()
			if err != nil {
				t.Fatal(err)
			}
			if formatUsage(got) != formatUsage(tt.want) || got.Name != tt.want.Name || got.Parent != tt.want.Parent {
				t.Errorf("got  %s %s %s\nwant %s %s %s", got.Name, got.Parent, formatUsage(got), tt.want.Name, tt.want.Parent, formatUsage(tt.want))
			}
		})
	}
}

func TestExplainReasons(t *testing.T) {
	q := withPreemption(cpuCQ("q", "", 4), LowerPriority, "", 0)
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{q}})
	admitNow(t, s, wl("low", "q", 0, 0, cpu(4)))
	mustEnqueue(t, s, wl("high", "q", 5, 1, cpu(2)), wl("huge", "q", 9, 2, cpu(5)))
	tests := []struct {
		id       string
		reason   Reason
		position int
		message  string
	}{
		{"low", ReasonAdmitted, -1, "admitted"},
		// The sentence counts from 1, as the API's position does; the
		// field counts those ahead.
		{"huge", ReasonInsufficientQuota, 0, "position 1 in q: default/cpu: requested 5, available 0 (nominal 4, borrowable 0)"},
		{"high", ReasonNeedsPreemption, 1, "position 2 in q: default/cpu: requested 2, available 0 (nominal 4, borrowable 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			e, err := s.Explain(tt.id)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Sentence(units); e.Reason != tt.reason || e.Position != tt.position || got != tt.message {
				t.Errorf("Explain = %+v (%q), want %s at %d: %q", e, got, tt.reason, tt.position, tt.message)
			}
		})
	}
	if e, _ := s.Explain("low"); e.Flavors["cpu"] != "default" {
		t.Errorf("admitted flavors %v", e.Flavors)
	}
	// Quantities are written by the caller's formatter, which knows their
	// unit.
	e, _ := s.Explain("huge")
	if got, want := e.Sentence(func(v int64) string { return strconv.FormatInt(v, 10) + "u" }),
		"position 1 in q: default/cpu: requested 5u, available 0u (nominal 4u, borrowable 0u)"; got != want {
		t.Errorf("Sentence = %q, want %q", got, want)
	}
}

// units writes a quantity as the plain number the tests count in.
func units(v int64) string { return strconv.FormatInt(v, 10) }

func TestScheduleStampsAndLimits(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{cpuCQ("q", "", 4)}})
	mustEnqueue(t, s, wl("a", "q", 0, 0, cpu(1)), wl("b", "q", 0, 1, cpu(1)))
	if ds := s.Schedule(t0, 0); ds != nil {
		t.Errorf("Schedule(max 0) = %+v", ds)
	}
	now := t0.Add(time.Hour)
	ds := s.Schedule(now, 10)
	if len(ds) != 2 || !ds[0].At.Equal(now) || ds[0].Kind.String() != "Admit" {
		t.Errorf("decisions %+v, want two admissions at %v", ds, now)
	}
}

func TestAdmittedUsageSurvivesFlavorRemoval(t *testing.T) {
	two := cq("q", "", grp(flavor("old", rq("cpu", 4)), flavor("new", rq("cpu", 4))))
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{two}})
	admitNow(t, s, wl("a", "q", 0, 0, cpu(3)))
	if err := s.Reconfigure(Config{ClusterQueues: []ClusterQueue{cq("q", "", grp(flavor("new", rq("cpu", 4))))}}); err != nil {
		t.Fatal(err)
	}
	u, _ := s.ClusterQueueUsage("q")
	if got := formatUsage(u); got != "pending=0 admitted=1 [new/cpu nominal=4 subtree=4 used=0 borrowed=0 lent=0 available=4 bl=- ll=-] [old/cpu nominal=0 subtree=0 used=3 borrowed=3 lent=0 available=0 bl=- ll=-]" {
		t.Errorf("usage %s", got)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
}

// A cohort that queues (or cohorts) only name, as Kueue lets them, exists
// without quota of its own: its members borrow from each other through
// it, and a defined cohort may name it as its parent.
func TestImplicitCohortsShareQuota(t *testing.T) {
	cfg := Config{Cohorts: []Cohort{{Name: "team", Parent: "org"}}, ClusterQueues: []ClusterQueue{
		cpuCQ("a", "shared", 4), cpuCQ("b", "shared", 4), cpuCQ("c", "team", 2), cpuCQ("d", "org", 2)}}
	s := mustNew(t, cfg)
	if len(cfg.Cohorts) != 1 {
		t.Fatalf("New changed its argument: %+v", cfg.Cohorts)
	}
	mustEnqueue(t, s, wl("a1", "a", 0, 0, cpu(7)), wl("c1", "c", 0, 1, cpu(4)))
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"a1", "c1"}) {
		t.Fatalf("admitted %v, want a1 borrowing from b and c1 from d through the implicit org", got)
	}
	for name, subtree := range map[string]int64{"shared": 8, "org": 4} {
		u, err := s.CohortUsage(name)
		if err != nil || u.Name != name || len(u.Resources) != 1 || u.Resources[0].Subtree != subtree || u.Resources[0].Nominal != 0 {
			t.Errorf("usage of the implicit cohort %s = %+v, %v; want its members' %d and none of its own", name, u, err, subtree)
		}
	}
	// Reconfigured without the queues that named it, the cohort is gone.
	if err := s.Reconfigure(Config{ClusterQueues: []ClusterQueue{cpuCQ("a", "", 8), cpuCQ("c", "", 4)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CohortUsage("shared"); !errors.Is(err, ErrUnknownCohort) {
		t.Errorf("usage of a cohort no queue names = %v, want ErrUnknownCohort", err)
	}
}
