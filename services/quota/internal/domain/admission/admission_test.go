package admission

import (
	"slices"
	"testing"
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
