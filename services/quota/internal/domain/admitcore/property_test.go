package admitcore

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// fact is one recorded mutation, for replay.
type fact struct {
	kind      string
	w         Workload
	id        string
	a         Assignment
	preemptor string
}

func (f fact) apply(s *State) error {
	switch f.kind {
	case "enqueue":
		return s.Enqueue(f.w)
	case "admit":
		return s.Admit(f.id, f.a)
	case "preempt":
		return s.Preempt(f.id, f.preemptor)
	case "evict":
		return s.Evict(f.id)
	case "remove":
		return s.Remove(f.id)
	}
	return fmt.Errorf("unknown fact %q", f.kind)
}

func randomConfig(r *rand.Rand) Config {
	policies := []PreemptionPolicy{"", Never, LowerPriority, LowerOrNewerEqualPriority}
	reclaims := []PreemptionPolicy{"", Never, LowerPriority, Any}
	quota := func(inCohort bool) []ResourceGroup {
		var flavors []FlavorQuotas
		for _, f := range []string{"f1", "f2"} {
			var res []ResourceQuota
			for _, name := range []string{"cpu", "gpu"} {
				q := ResourceQuota{Name: name, NominalQuota: r.Int64N(8)}
				if inCohort && r.IntN(3) == 0 {
					q.BorrowingLimit = i64(r.Int64N(5))
				}
				if inCohort && r.IntN(3) == 0 {
					q.LendingLimit = i64(r.Int64N(q.NominalQuota + 1))
				}
				res = append(res, q)
			}
			flavors = append(flavors, FlavorQuotas{Name: f, Resources: res})
		}
		return []ResourceGroup{{CoveredResources: []string{"cpu", "gpu"}, Flavors: flavors}}
	}
	cfg := Config{Cohorts: []Cohort{{Name: "root"}, {Name: "child", Parent: "root"}}}
	if r.IntN(2) == 0 {
		cfg.Cohorts[0].ResourceGroups = quota(false)
	}
	if r.IntN(2) == 0 {
		cfg.Cohorts[1].ResourceGroups = quota(true)
	}
	for i := range 5 {
		cohort := []string{"", "root", "child", "child", "root"}[i]
		c := ClusterQueue{
			Name: fmt.Sprintf("q%d", i), Cohort: cohort, ResourceGroups: quota(cohort != ""),
			QueueingStrategy: []QueueingStrategy{StrictFIFO, BestEffortFIFO}[r.IntN(2)],
			Preemption: Preemption{
				WithinClusterQueue: policies[r.IntN(len(policies))], ReclaimWithinCohort: reclaims[r.IntN(len(reclaims))],
				MinPriorityGap: r.IntN(3),
			},
		}
		cfg.ClusterQueues = append(cfg.ClusterQueues, c)
	}
	return cfg
}

// checkLimits recomputes quotas from the configuration and usage from the
// admitted workloads, independently of the State's own bookkeeping, and
// fails when any limit is exceeded.
func checkLimits(t *testing.T, cfg Config, s *State) {
	t.Helper()
	type quotas struct{ nominal, borrow, lend map[frKey]*int64 }
	read := func(groups []ResourceGroup) quotas {
		q := quotas{map[frKey]*int64{}, map[frKey]*int64{}, map[frKey]*int64{}}
		for _, g := range groups {
			for _, f := range g.Flavors {
				for _, rq := range f.Resources {
					k := frKey{f.Name, rq.Name}
					q.nominal[k], q.borrow[k], q.lend[k] = i64(rq.NominalQuota), rq.BorrowingLimit, rq.LendingLimit
				}
			}
		}
		return q
	}
	children := map[string][]string{}
	own := map[string]quotas{}
	for _, ch := range cfg.Cohorts {
		own[ch.Name] = read(ch.ResourceGroups)
		children[ch.Parent] = append(children[ch.Parent], ch.Name)
	}
	used := map[string]map[frKey]int64{}
	for _, c := range cfg.ClusterQueues {
		own[c.Name] = read(c.ResourceGroups)
		children[c.Cohort] = append(children[c.Cohort], c.Name)
		used[c.Name] = map[frKey]int64{}
	}
	for _, w := range s.workloads {
		if w.admitted {
			for _, r := range w.reqs {
				used[w.ClusterQueue][frKey{w.flavors[r.res], r.res}] += r.qty
			}
		}
	}
	keys := []frKey{{"f1", "cpu"}, {"f1", "gpu"}, {"f2", "cpu"}, {"f2", "gpu"}}
	// walk returns subtree quota, guaranteed quota and usage of a node.
	var walk func(name string, parent string) (map[frKey]int64, map[frKey]int64, map[frKey]int64)
	walk = func(name, parent string) (map[frKey]int64, map[frKey]int64, map[frKey]int64) {
		sub, local, use := map[frKey]int64{}, map[frKey]int64{}, map[frKey]int64{}
		q := own[name]
		for _, k := range keys {
			if v := q.nominal[k]; v != nil {
				sub[k] = *v
			}
			use[k] = used[name][k]
		}
		for _, c := range children[name] {
			cs, cl, cu := walk(c, name)
			for _, k := range keys {
				sub[k] += cs[k] - cl[k]
				use[k] += max(0, cu[k]-cl[k])
			}
		}
		for _, k := range keys {
			if l := q.lend[k]; l != nil {
				local[k] = max(0, sub[k]-*l)
			}
			if b := q.borrow[k]; b != nil && use[k] > sub[k]+*b {
				t.Fatalf("%s uses %d of %v: above quota %d + borrowing limit %d", name, use[k], k, sub[k], *b)
			}
			if parent == "" && use[k] > sub[k] {
				t.Fatalf("%s (root) uses %d of %v: above capacity %d", name, use[k], k, sub[k])
			}
		}
		return sub, local, use
	}
	for _, root := range children[""] {
		walk(root, "")
	}
}

func TestRandomSequencesRespectLimitsAndReplay(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			cfg := randomConfig(r)
			// A quarter of the runs without preemption.
			preemption := seed%4 != 0
			if !preemption {
				for i := range cfg.ClusterQueues {
					cfg.ClusterQueues[i].Preemption = Preemption{}
				}
			}
			s := mustNew(t, cfg)
			var facts []fact
			var evicting []string
			record := func(f fact) {
				t.Helper()
				if err := f.apply(s); err != nil {
					t.Fatalf("%+v: %v", f, err)
				}
				facts = append(facts, f)
			}
			ids := func(admitted bool) []string {
				var out []string
				for _, id := range slices.Sorted(maps.Keys(s.workloads)) {
					if s.workloads[id].admitted == admitted {
						out = append(out, id)
					}
				}
				return out
			}
			next := 0
			for step := range 400 {
				switch p := r.IntN(100); {
				case p < 35:
					next++
					reqs := map[string]int64{"cpu": 1 + r.Int64N(6)}
					if r.IntN(2) == 0 {
						reqs["gpu"] = r.Int64N(4)
					}
					record(fact{kind: "enqueue", w: wl(fmt.Sprintf("w%d", next), fmt.Sprintf("q%d", r.IntN(5)), r.IntN(8), step, reqs)})
				case p < 70:
					before := fingerprint(s)
					mx := 1 + r.IntN(10)
					ds := s.Schedule(t0, mx)
					if step%8 == 0 {
						// Memos are internal: a state rebuilt from the facts,
						// without them, decides the same.
						fresh := mustNew(t, cfg)
						for _, f := range facts {
							if err := f.apply(fresh); err != nil {
								t.Fatal(err)
							}
						}
						if got := fresh.Schedule(t0, mx); !reflect.DeepEqual(ds, got) {
							t.Fatalf("step %d: decisions depend on memos:\n%+v\nrebuilt state:\n%+v", step, ds, got)
						}
					}
					if again := s.Schedule(t0, len(ds)+1); !reflect.DeepEqual(ds, again[:min(len(ds), len(again))]) {
						t.Fatalf("Schedule not repeatable:\n%+v\n%+v", ds, again)
					}
					if fingerprint(s) != before {
						t.Fatalf("Schedule changed the state:\n%s\nwant\n%s", fingerprint(s), before)
					}
					for _, d := range ds {
						if d.Kind == DecideAdmit {
							record(fact{kind: "admit", id: d.ID, a: d.Assignment})
						} else {
							record(fact{kind: "preempt", id: d.Victim, preemptor: d.Preemptor})
							evicting = append(evicting, d.Victim)
						}
					}
					if len(ds) < mx && !preemption {
						// Fewer than max, no preemption: everything was
						// considered.
						if more := s.Schedule(t0, 100); len(more) > 0 {
							t.Fatalf("step %d: after %+v (max %d), Schedule decided more: %+v", step, ds, mx, more)
						}
					}
				case p < 85:
					if len(evicting) > 0 {
						i := r.IntN(len(evicting))
						id := evicting[i]
						evicting = slices.Delete(evicting, i, i+1)
						if w := s.workloads[id]; w != nil && w.admitted {
							record(fact{kind: "evict", id: id})
						}
					}
				case p < 95:
					if all := slices.Sorted(maps.Keys(s.workloads)); len(all) > 0 {
						record(fact{kind: "remove", id: all[r.IntN(len(all))]})
					}
				default:
					if adm := ids(true); len(adm) > 0 {
						id := adm[r.IntN(len(adm))]
						if !s.workloads[id].evicting {
							record(fact{kind: "evict", id: id})
						}
					}
				}
				checkLimits(t, cfg, s)
			}
			replayed := mustNew(t, cfg)
			for _, f := range facts {
				if err := f.apply(replayed); err != nil {
					t.Fatalf("replay %+v: %v", f, err)
				}
			}
			if got, want := fingerprint(replayed), fingerprint(s); got != want {
				t.Fatalf("replayed state differs:\n%s\nwant\n%s", got, want)
			}
			if got, want := s.Schedule(t0, 50), replayed.Schedule(t0, 50); !reflect.DeepEqual(got, want) {
				t.Fatalf("replayed decisions differ:\n%+v\n%+v", got, want)
			}
		})
	}
}
