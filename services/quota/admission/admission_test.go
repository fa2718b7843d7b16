package admission_test

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

// A standard task borrows the cohort's 8 GPUs; a premium task needing the
// premium queue's 8 GPUs reclaims them: the standard one is asked to stop
// (naming its stay), waits again once it has stopped, and is admitted
// again after the premium one finished.
func TestPreemptionAcrossTheCohort(t *testing.T) {
	e := newEnv(t)
	std := &task{id: "std", tenant: "t-std", queue: admission.LowPriorityQueue, priority: 5, gpus: "8"}
	e.submit(std)
	e.waitState("std", "admitted", 1)
	if ev := e.quotaEvent("std", 2).GetWorkloadAdmitted(); ev == nil || !ev.Borrowing || ev.TaskVersion != 1 ||
		ev.Flavors["nvidia.com/gpu"] != admission.DefaultFlavor {
		t.Fatalf("admission of std = %v, want borrowing at stay 1 in %s", ev, admission.DefaultFlavor)
	}
	e.publish(std, &taskv1.TaskLeased{AttemptId: "a1"}) // v2: running, no change

	prem := &task{id: "prem", tenant: "t-prem", queue: admission.HighPriorityQueue, priority: 1, gpus: "8"}
	e.submit(prem)
	e.waitState("std", "evicting", 1)
	if st, _ := e.state("prem"); st != "pending" {
		t.Fatalf("prem is %s while std still holds the GPUs", st)
	}
	req := e.quotaEvent("std", 3).GetWorkloadPreemptionRequested()
	if req == nil || req.PreemptorTaskId != "prem" || req.TaskVersion != 1 {
		t.Fatalf("preemption = %v, want std's stay 1 for prem", req)
	}

	// The scheduler stops std (TaskPreempted keeps the usage) and requeues
	// it once its agent confirmed.
	e.publish(std, &taskv1.TaskPreempted{AttemptId: "a1", PreemptedBy: "prem"}) // v3
	if st, _ := e.state("std"); st != "evicting" {
		t.Fatalf("std is %s after TaskPreempted, want evicting until requeued", st)
	}
	e.publish(std, &taskv1.TaskRequeued{FromStatus: "preempted", Reason: "preempted"}) // v4
	e.waitState("prem", "admitted", 1)
	e.waitState("std", "pending", 4)
	if got, want := e.events("std"), []string{"WorkloadQueued", "WorkloadAdmitted", "WorkloadPreemptionRequested",
		"WorkloadEvicted", "WorkloadQueued"}; !slices.Equal(got, want) {
		t.Fatalf("std events = %v, want %v", got, want)
	}

	e.publish(prem, &taskv1.TaskSucceeded{AttemptId: "p1"})
	e.waitState("prem", "finished", 1)
	e.waitState("std", "admitted", 4)

	// The decisions reach the quota topic, in order per workload.
	decisions := e.consumeDecisions(t, "std", 3)
	if decisions[0].GetWorkloadAdmitted().GetTaskVersion() != 1 || decisions[1].GetWorkloadPreemptionRequested() == nil ||
		decisions[2].GetWorkloadAdmitted().GetTaskVersion() != 4 {
		t.Fatalf("decisions on the topic = %v", decisions)
	}
}

// consumeDecisions reads the quota topic until n decisions about task
// arrived.
func (e *env) consumeDecisions(t *testing.T, taskID string, n int) []*quotav1.QuotaEvent {
	t.Helper()
	opts, err := e.broker.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	c, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(admission.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15e9)
	defer cancel()
	var out []*quotav1.QuotaEvent
	for len(out) < n {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("only %d decisions about %s on the topic", len(out), taskID)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var env quotav1.QuotaEvent
			if proto.Unmarshal(r.Value, &env) != nil || env.AggregateId != "workload/"+taskID {
				return
			}
			if env.GetWorkloadAdmitted() != nil || env.GetWorkloadPreemptionRequested() != nil {
				out = append(out, &env)
			}
		})
	}
	return out
}

// The server records the defaults before it serves, and Run would do it
// again: the second call touches nothing (it succeeds even on a context
// already done), and a Run stopped before its first write is a stop, not
// a failure.
func TestRecordDefaultsOnceAndRunStoppedEarly(t *testing.T) {
	e := newEnv(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.svc.RecordDefaults(done); err != nil {
		t.Errorf("RecordDefaults again, on a context already done = %v, want nil", err)
	}
	cfg := admission.Config{DB: e.pool, Kafka: e.broker.Config(), Partitions: 1, Logger: testLogger(t)}
	fresh, err := admission.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.RecordDefaults(done); err == nil {
		t.Error("a first RecordDefaults on a context already done succeeded; want its error")
	}
	if err := fresh.Run(done); err != nil {
		t.Errorf("Run on a context already done = %v, want nil", err)
	}
}
