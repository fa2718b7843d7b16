package admitcore

import (
	"slices"
	"testing"
)

func withPreemption(c ClusterQueue, within, reclaim PreemptionPolicy, gap int) ClusterQueue {
	c.Preemption = Preemption{WithinClusterQueue: within, ReclaimWithinCohort: reclaim, MinPriorityGap: gap}
	return c
}

func TestPreemptionVictims(t *testing.T) {
	cohortOf := func(a, b ClusterQueue) Config {
		return Config{Cohorts: []Cohort{{Name: "c"}}, ClusterQueues: []ClusterQueue{a, b}}
	}
	solo := func(within PreemptionPolicy, gap int) Config {
		return Config{ClusterQueues: []ClusterQueue{withPreemption(cpuCQ("q", "", 10), within, "", gap)}}
	}
	tests := []struct {
		name      string
		cfg       Config
		running   []Workload // admitted in this order
		preemptor Workload
		want      []string
	}{
		{
			name:      "within queue: lowest priority first",
			cfg:       solo(LowerPriority, 0),
			running:   []Workload{wl("low", "q", 1, 0, cpu(4)), wl("mid", "q", 5, 1, cpu(4))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
			want:      []string{"low"},
		},
		{
			name: "fewest victims, most recently admitted first among equals",
			cfg:  solo(LowerPriority, 0),
			running: []Workload{
				wl("a", "q", 1, 0, cpu(2)), wl("b", "q", 1, 1, cpu(2)), wl("c", "q", 2, 2, cpu(6))},
			preemptor: wl("p", "q", 10, 9, cpu(8)),
			want:      []string{"b", "c"},
		},
		{
			name: "put back victims that are not needed",
			cfg:  solo(LowerPriority, 0),
			running: []Workload{
				wl("small", "q", 1, 0, cpu(1)), wl("big", "q", 2, 1, cpu(9))},
			preemptor: wl("p", "q", 10, 9, cpu(8)),
			want:      []string{"big"},
		},
		{
			name:      "never preempts higher or equal priority with LowerPriority",
			cfg:       solo(LowerPriority, 0),
			running:   []Workload{wl("same", "q", 10, 10, cpu(10))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
		},
		{
			name:      "LowerOrNewerEqualPriority takes a newer equal",
			cfg:       solo(LowerOrNewerEqualPriority, 0),
			running:   []Workload{wl("newer", "q", 10, 10, cpu(10))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
			want:      []string{"newer"},
		},
		{
			name:      "LowerOrNewerEqualPriority spares an older equal",
			cfg:       solo(LowerOrNewerEqualPriority, 0),
			running:   []Workload{wl("older", "q", 10, 1, cpu(10))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
		},
		{
			name:      "gap 3 spares a victim 2 levels below",
			cfg:       solo(LowerPriority, 3),
			running:   []Workload{wl("p8", "q", 8, 0, cpu(10))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
		},
		{
			name:      "gap 3 takes a victim 3 levels below, skipping closer ones",
			cfg:       solo(LowerPriority, 3),
			running:   []Workload{wl("p7", "q", 7, 0, cpu(5)), wl("p8", "q", 8, 1, cpu(5))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
			want:      []string{"p7"},
		},
		{
			name:      "Never preempts nothing",
			cfg:       solo(Never, 0),
			running:   []Workload{wl("low", "q", 0, 0, cpu(10))},
			preemptor: wl("p", "q", 10, 9, cpu(4)),
		},
		{
			name: "reclaim Any takes back lent quota from higher priority",
			cfg: cohortOf(withPreemption(cpuCQ("a", "c", 4), Never, Any, 0),
				cpuCQ("b", "c", 4)),
			running:   []Workload{wl("b-hi", "b", 100, 0, cpu(6))},
			preemptor: wl("p", "a", 1, 9, cpu(4)),
			want:      []string{"b-hi"},
		},
		{
			name: "reclaim LowerPriority spares higher priority",
			cfg: cohortOf(withPreemption(cpuCQ("a", "c", 4), Never, LowerPriority, 0),
				cpuCQ("b", "c", 4)),
			running:   []Workload{wl("b-hi", "b", 100, 0, cpu(6))},
			preemptor: wl("p", "a", 1, 9, cpu(4)),
		},
		{
			name: "reclaim only from queues that borrow",
			cfg: cohortOf(withPreemption(cpuCQ("a", "c", 4), Never, Any, 0),
				cpuCQ("b", "c", 4)),
			running:   []Workload{wl("a0", "a", 1, 0, cpu(4)), wl("b0", "b", 0, 1, cpu(4))},
			preemptor: wl("p", "a", 1, 9, cpu(2)),
		},
		{
			name: "other queues before own queue",
			cfg: cohortOf(withPreemption(cpuCQ("a", "c", 4), LowerPriority, LowerPriority, 0),
				cpuCQ("b", "c", 4)),
			running: []Workload{
				wl("a-low", "a", 0, 0, cpu(2)), wl("b-mid", "b", 5, 1, cpu(6))},
			preemptor: wl("p", "a", 10, 9, cpu(2)),
			want:      []string{"b-mid"},
		},
		{
			name: "own queue with borrowing when the cohort has nothing to reclaim",
			cfg: cohortOf(withPreemption(cpuCQ("a", "c", 4), LowerPriority, LowerPriority, 0),
				cpuCQ("b", "c", 4)),
			running: []Workload{
				wl("a-low", "a", 0, 0, cpu(6)), wl("b-hi", "b", 50, 1, cpu(2))},
			preemptor: wl("p", "a", 10, 9, cpu(6)),
			want:      []string{"a-low"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, tt.cfg)
			admitNow(t, s, tt.running...)
			mustEnqueue(t, s, tt.preemptor)
			ds := s.Schedule(t0, 100)
			got := victimIDs(ds)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("victims %v, want %v (decisions %+v)", got, tt.want, ds)
			}
			for _, d := range ds {
				if d.Kind == DecidePreempt && d.Preemptor != tt.preemptor.ID {
					t.Errorf("preemptor %s, want %s", d.Preemptor, tt.preemptor.ID)
				}
			}
			if len(tt.want) == 0 {
				if len(ds) != 0 {
					t.Errorf("decisions %+v, want none", ds)
				}
				return
			}
			// The victims free enough: once evicted, the preemptor is admitted.
			apply(t, s, ds)
			if got := admittedIDs(s.Schedule(t0, 100)); !slices.Contains(got, tt.preemptor.ID) {
				t.Errorf("after evictions admitted %v, want %s", got, tt.preemptor.ID)
			}
		})
	}
}

// The embedded defaults (docs/api/quota.md): premium queue 8 GPUs,
// standard queue 2 GPUs, one cohort; preempt only with a priority gap of
// at least 3.
func tiers() Config {
	gpuCQ := func(name string, nominal int64) ClusterQueue {
		c := cq(name, "gpu", grp(flavor("a100", rq("nvidia.com/gpu", nominal))))
		c.Preemption = Preemption{WithinClusterQueue: LowerPriority, ReclaimWithinCohort: LowerPriority, MinPriorityGap: 3}
		return c
	}
	return Config{Cohorts: []Cohort{{Name: "gpu"}}, ClusterQueues: []ClusterQueue{gpuCQ("premium", 8), gpuCQ("standard", 2)}}
}

func gpus(n int64) map[string]int64 { return map[string]int64{"nvidia.com/gpu": n} }

func TestTiersPremiumPreemptsBorrowingStandard(t *testing.T) {
	s := mustNew(t, tiers())
	// Standard borrows 4 of premium's idle GPUs; premium uses 4: cohort full.
	admitNow(t, s,
		wl("s1", "standard", 1, 0, gpus(2)),
		wl("s2", "standard", 1, 1, gpus(2)),
		wl("s3", "standard", 1, 2, gpus(2)),
		wl("p1", "premium", 5, 3, gpus(4)),
	)
	std, _ := s.ClusterQueueUsage("standard")
	if r := std.Resources[0]; r.Used != 6 || r.Borrowed != 4 {
		t.Fatalf("standard usage %+v, want used 6, borrowed 4", r)
	}
	prem, _ := s.ClusterQueueUsage("premium")
	if r := prem.Resources[0]; r.Lent != 4 {
		t.Errorf("premium lent %d, want 4", r.Lent)
	}
	mustEnqueue(t, s, wl("p2", "premium", 5, 4, gpus(4)))
	ds := s.Schedule(t0, 10)
	// Most recently admitted standard workloads go first; two free 4 GPUs
	// and leave standard within its nominal 2.
	if got := victimIDs(ds); !slices.Equal(got, []string{"s2", "s3"}) {
		t.Fatalf("victims %v, want [s2 s3]", got)
	}
	for _, d := range ds {
		if err := s.Preempt(d.Victim, d.Preemptor); err != nil {
			t.Fatal(err)
		}
	}
	// While the victims stop, no further preemption for the same need.
	if ds := s.Schedule(t0, 10); len(ds) != 0 {
		t.Fatalf("decisions while victims stop: %+v", ds)
	}
	e, _ := s.Explain("p2")
	if e.Reason != ReasonWaitingForVictims || !slices.Equal(e.WaitingFor, []string{"s3", "s2"}) {
		t.Errorf("Explain(p2) = %+v", e)
	}
	if e, _ := s.Explain("s2"); e.Reason != ReasonEvicting || e.Preemptor != "p2" {
		t.Errorf("Explain(s2) = %+v", e)
	}
	if err := s.Evict("s2"); err != nil {
		t.Fatal(err)
	}
	// s2 is pending again but may not take the room freed for p2.
	if ds := s.Schedule(t0, 10); len(ds) != 0 {
		t.Fatalf("decisions with one victim still stopping: %+v", ds)
	}
	if err := s.Evict("s3"); err != nil {
		t.Fatal(err)
	}
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"p2"}) {
		t.Fatalf("admitted %v, want [p2]", got)
	}
}

func TestTiersGapProtectsCloseStandard(t *testing.T) {
	s := mustNew(t, tiers())
	admitNow(t, s, wl("s1", "standard", 3, 0, gpus(10)))
	// Premium priority 5 vs standard 3: gap 2 < 3, no preemption.
	mustEnqueue(t, s, wl("p", "premium", 5, 1, gpus(2)))
	if ds := s.Schedule(t0, 10); len(ds) != 0 {
		t.Fatalf("decisions %+v, want none", ds)
	}
	if e, _ := s.Explain("p"); e.Reason != ReasonNeedsPreemption && e.Reason != ReasonInsufficientQuota {
		t.Errorf("Explain(p) = %+v", e)
	}
}

func TestPreemptorsDoNotShareVictims(t *testing.T) {
	s := mustNew(t, Config{ClusterQueues: []ClusterQueue{withPreemption(cpuCQ("q", "", 4), LowerPriority, "", 0)}})
	admitNow(t, s, wl("low", "q", 0, 0, cpu(4)))
	mustEnqueue(t, s, wl("p1", "q", 10, 1, cpu(4)), wl("p2", "q", 9, 2, cpu(4)))
	ds := s.Schedule(t0, 10)
	if len(ds) != 1 || ds[0].Victim != "low" || ds[0].Preemptor != "p1" {
		t.Fatalf("decisions %+v, want low preempted for p1 only", ds)
	}
}

func TestReclaimAcrossCohortTree(t *testing.T) {
	// a and b sit in different child cohorts of org; b borrows a's idle
	// quota through org, and a takes it back.
	cfg := Config{
		Cohorts: []Cohort{{Name: "org"}, {Name: "a-dept", Parent: "org"}, {Name: "b-dept", Parent: "org"}},
		ClusterQueues: []ClusterQueue{
			withPreemption(cpuCQ("a", "a-dept", 4), Never, LowerPriority, 0),
			cpuCQ("b", "b-dept", 4),
		},
	}
	s := mustNew(t, cfg)
	admitNow(t, s, wl("b1", "b", 0, 0, cpu(4)), wl("b2", "b", 0, 1, cpu(4)))
	if u, _ := s.CohortUsage("org"); u.Resources[0].Used != 8 {
		t.Fatalf("org usage %+v, want 8 used", u.Resources[0])
	}
	mustEnqueue(t, s, wl("p", "a", 10, 2, cpu(4)))
	ds := s.Schedule(t0, 10)
	if got := victimIDs(ds); !slices.Equal(got, []string{"b2"}) {
		t.Fatalf("victims %v, want [b2] (most recently admitted)", got)
	}
	apply(t, s, ds)
	if got := admittedIDs(s.Schedule(t0, 10)); !slices.Equal(got, []string{"p"}) {
		t.Errorf("admitted %v, want [p]", got)
	}
}
