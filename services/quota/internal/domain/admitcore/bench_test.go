package admitcore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"
)

// benchConfig is 5 cohorts of 10 ClusterQueues, each with two GPU flavors
// (cpu+gpu in one group) and mixed queueing strategies. With preemption,
// every third queue preempts lower priorities within itself, with seed
// 004's gap of 3, and reclaims lent quota.
func benchConfig(preemption bool) Config {
	var cfg Config
	for c := range 5 {
		cohort := fmt.Sprintf("cohort-%d", c)
		cfg.Cohorts = append(cfg.Cohorts, Cohort{Name: cohort})
		for q := range 10 {
			name := fmt.Sprintf("cq-%d-%d", c, q)
			spec := cq(name, cohort, grp(
				flavor("a100", rq("cpu", 64_000), rq("nvidia.com/gpu", 8_000)),
				flavor("l4", rq("cpu", 32_000), rq("nvidia.com/gpu", 4_000))))
			if q%2 == 0 {
				spec.QueueingStrategy = StrictFIFO
			}
			if preemption && q%3 == 0 {
				spec.Preemption = Preemption{WithinClusterQueue: LowerPriority, ReclaimWithinCohort: LowerPriority, MinPriorityGap: 3}
			}
			cfg.ClusterQueues = append(cfg.ClusterQueues, spec)
		}
	}
	return cfg
}

type benchGen struct {
	r    *rand.Rand
	next int
}

func (g *benchGen) workload() Workload {
	g.next++
	reqs := map[string]int64{"cpu": 1000 * (1 + g.r.Int64N(16))}
	if g.r.IntN(4) != 0 {
		reqs["nvidia.com/gpu"] = 1000 * (1 + g.r.Int64N(4))
	}
	return Workload{
		ID:           fmt.Sprintf("wl-%07d", g.next),
		ClusterQueue: fmt.Sprintf("cq-%d-%d", g.r.IntN(5), g.r.IntN(10)),
		Priority:     g.r.IntN(10),
		Created:      t0.Add(time.Duration(g.next) * time.Millisecond),
		Requests:     reqs,
	}
}

// BenchmarkScheduleSteadyState keeps 10,000 workloads pending across 50
// ClusterQueues in 5 cohorts while capacity is freed steadily: each
// iteration removes the oldest admitted workload, enqueues a new one, and
// applies what Schedule decides as the quota service would (admissions;
// preemptions as Preempt then Evict), calling it again as its contract
// asks.
// It reports decisions per second and the median time from a Remove to
// the return of the Schedule call with the next admission.
func BenchmarkScheduleSteadyState(b *testing.B) { benchSteadyState(b, false, 1) }

// BenchmarkScheduleSteadyStateBatch16 frees capacity 16 workloads at a
// time, as a service applying a burst of completions before scheduling.
func BenchmarkScheduleSteadyStateBatch16(b *testing.B) { benchSteadyState(b, false, 16) }

// BenchmarkScheduleSteadyStatePreemption is BenchmarkScheduleSteadyState
// with a third of the queues preempting.
func BenchmarkScheduleSteadyStatePreemption(b *testing.B) { benchSteadyState(b, true, 1) }

func benchSteadyState(b *testing.B, preemption bool, batch int) {
	s, err := New(benchConfig(preemption))
	if err != nil {
		b.Fatal(err)
	}
	g := &benchGen{r: rand.New(rand.NewPCG(1, 2))}
	var admitted []string // in admission order
	applyAll := func(ds []Decision) int {
		admits := 0
		for _, d := range ds {
			switch d.Kind {
			case DecideAdmit:
				if err := s.Admit(d.ID, d.Assignment); err != nil {
					b.Fatal(err)
				}
				admitted = append(admitted, d.ID)
				admits++
			case DecidePreempt:
				if err := s.Preempt(d.Victim, d.Preemptor); err != nil {
					b.Fatal(err)
				}
				if err := s.Evict(d.Victim); err != nil {
					b.Fatal(err)
				}
			}
		}
		return admits
	}
	// Fill capacity, then top the queues up to 10,000 pending.
	for range 10_000 {
		if err := s.Enqueue(g.workload()); err != nil {
			b.Fatal(err)
		}
	}
	for {
		ds := s.Schedule(t0, 1000)
		if len(ds) == 0 {
			break
		}
		applyAll(ds)
	}
	pending := func() int { return len(s.workloads) - len(admitted) }
	for pending() < 10_000 {
		if err := s.Enqueue(g.workload()); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("admitted %d, pending %d", len(admitted), pending())

	var decisions int
	var latencies []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	start, cpuStart := time.Now(), cpuTime(b)
	for i := 0; i < b.N; i++ {
		t := time.Now()
		for range batch {
			// The oldest admitted workload finishes (skip ones evicted since).
			for len(admitted) > 0 {
				id := admitted[0]
				admitted = admitted[1:]
				if w := s.workloads[id]; w != nil && w.admitted {
					if err := s.Remove(id); err != nil {
						b.Fatal(err)
					}
					break
				}
			}
			if err := s.Enqueue(g.workload()); err != nil {
				b.Fatal(err)
			}
		}
		admittedOne := false
		for {
			// Without preemption a call returning fewer than max
			// decisions has considered everything; with it, call again
			// while decisions come.
			ds := s.Schedule(t0, 64)
			if !admittedOne && slices.ContainsFunc(ds, func(d Decision) bool { return d.Kind == DecideAdmit }) {
				latencies = append(latencies, time.Since(t))
				admittedOne = true
			}
			decisions += len(ds)
			applyAll(ds)
			if len(ds) == 0 || (len(ds) < 64 && !preemption) {
				break
			}
		}
	}
	elapsed, cpu := time.Since(start), cpuTime(b)-cpuStart
	b.StopTimer()
	b.ReportMetric(float64(decisions)/elapsed.Seconds(), "decisions/s")
	// Per second of CPU used by the process: steadier than wall time on a
	// machine shared with other work.
	b.ReportMetric(float64(decisions)/cpu.Seconds(), "decisions/cpu-s")
	if len(latencies) > 0 {
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "µs-remove-to-admit(median)")
	}
	b.ReportMetric(float64(pending()), "pending-at-end")
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
