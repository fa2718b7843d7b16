package admission_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// queueRequest is the scheduler's QueueWorkload for a task's first stay.
func queueRequest(tk *task) *quotav1.QueueWorkloadRequest {
	return &quotav1.QueueWorkloadRequest{TaskId: tk.id, TaskVersion: 1, TenantId: tk.tenant, ClusterQueue: tk.queue,
		Priority: tk.priority, CreatedAt: timestamppb.Now(), Resources: map[string]string{"nvidia.com/gpu": tk.gpus}}
}

// queueWorkload calls QueueWorkload, again while the loop's first session
// has not started (Unavailable).
func (e *env) queueWorkload(req *quotav1.QueueWorkloadRequest) (*quotav1.QueueWorkloadResponse, error) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := e.client().QueueWorkload(admin(), req)
		if code(err) != codes.Unavailable || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stay handed over directly is admitted in the loop's next cycle and
// answered so, recorded before the answer; the same stay arriving through
// the task topic afterwards, or before, is applied once. A stay that does
// not fit is answered not admitted and waits in its queue. A task's end
// handed over directly frees its quota in the next cycle, whose
// admissions are the answer.
func TestQueueWorkloadAdmitsAtOnceAndOnlyOnce(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "1")
	direct := &task{id: "direct", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	res, err := e.queueWorkload(queueRequest(direct))
	if err != nil || !res.Admitted || res.TaskVersion != 1 || res.ClusterQueue != "solo" || res.Flavors["nvidia.com/gpu"] != "a100" {
		t.Fatalf("QueueWorkload = %v, %v; want admitted at stay 1 in solo on a100", res, err)
	}
	if st, v := e.state("direct"); st != "admitted" || v != 1 {
		t.Fatalf("answered admitted while recorded %q at stay %d", st, v)
	}

	// The same stay through the task topic, then a task behind it: once
	// the one behind is queued, the repeat has been through the loop.
	e.submit(direct)
	full := &task{id: "full", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	e.submit(full)
	e.waitState("full", "pending", 1)
	if got, want := e.events("direct"), []string{"WorkloadQueued", "WorkloadAdmitted"}; !slices.Equal(got, want) {
		t.Errorf("direct events = %v, want %v (the topic's repeat applied once)", got, want)
	}

	// Through the topic first, then directly: nothing more is recorded,
	// and the answer says it is not admitted (the queue is full).
	res, err = e.queueWorkload(queueRequest(full))
	if err != nil || res.Admitted {
		t.Fatalf("QueueWorkload of a stay that does not fit = %v, %v; want not admitted", res, err)
	}
	if got, want := e.events("full"), []string{"WorkloadQueued"}; !slices.Equal(got, want) {
		t.Errorf("full events = %v, want %v", got, want)
	}

	// The end of direct, handed over directly, frees its GPU in the next
	// cycle, which admits full and answers so; the same end through the
	// task topic records nothing more.
	fin, err := e.client().FinishWorkload(admin(), &quotav1.FinishWorkloadRequest{TaskId: "direct", TaskVersion: 2, TenantId: "t",
		Reason: "succeeded"})
	if err != nil || len(fin.Admitted) != 1 || fin.Admitted[0].TaskId != "full" || fin.Admitted[0].TaskVersion != 1 {
		t.Fatalf("FinishWorkload = %v, %v; want full admitted at stay 1", fin, err)
	}
	if st, _ := e.state("full"); st != "admitted" {
		t.Fatalf("answered full admitted while recorded %q", st)
	}
	e.publish(direct, &taskv1.TaskSucceeded{AttemptId: "a"}) // v2
	marker := &task{id: "marker", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	e.submit(marker)
	e.waitState("marker", "pending", 1)
	if got, want := e.events("direct"), []string{"WorkloadQueued", "WorkloadAdmitted", "WorkloadFinished"}; !slices.Equal(got, want) {
		t.Errorf("direct events = %v, want %v (the topic's end applied once)", got, want)
	}

	// A new stay that does not fit, handed over directly: queued, not
	// admitted, and admitted later through the usual path.
	late := &task{id: "late", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	if res, err := e.queueWorkload(queueRequest(late)); err != nil || res.Admitted {
		t.Fatalf("QueueWorkload of a stay behind a full queue = %v, %v; want not admitted", res, err)
	}
	if st, _ := e.state("late"); st != "pending" {
		t.Errorf("late is %q, want pending", st)
	}
	if m, n := e.admittedGPUs("solo"); m != 1000 || n != 1 {
		t.Errorf("admitted %dm GPUs in %d workloads, want 1 in 1", m, n)
	}
}

// QueueWorkload and FinishWorkload are the scheduler's: a tenant's
// principal is refused, and a request that names no task, an impossible
// priority or an unknown end is invalid; nothing is recorded.
func TestQueueWorkloadRefusesTenantsAndBadInput(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "1")
	tk := &task{id: "x", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	if _, err := e.queueWorkload(queueRequest(tk)); err != nil { // the loop is up
		t.Fatal(err)
	}
	tk = &task{id: "y", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	if _, err := e.client().QueueWorkload(user("t", "standard"), queueRequest(tk)); code(err) != codes.PermissionDenied {
		t.Errorf("a tenant's QueueWorkload: %v, want PermissionDenied", err)
	}
	for name, mutate := range map[string]func(*quotav1.QueueWorkloadRequest){
		"no task id":    func(r *quotav1.QueueWorkloadRequest) { r.TaskId = "" },
		"version 0":     func(r *quotav1.QueueWorkloadRequest) { r.TaskVersion = 0 },
		"priority 11":   func(r *quotav1.QueueWorkloadRequest) { r.Priority = 11 },
		"no queue":      func(r *quotav1.QueueWorkloadRequest) { r.ClusterQueue = "" },
		"no created_at": func(r *quotav1.QueueWorkloadRequest) { r.CreatedAt = nil },
	} {
		req := queueRequest(tk)
		mutate(req)
		if _, err := e.client().QueueWorkload(admin(), req); code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	finish := &quotav1.FinishWorkloadRequest{TaskId: "x", TaskVersion: 2, TenantId: "t", Reason: "succeeded"}
	if _, err := e.client().FinishWorkload(user("t", "standard"), finish); code(err) != codes.PermissionDenied {
		t.Errorf("a tenant's FinishWorkload: %v, want PermissionDenied", err)
	}
	finish.Reason = "preempted"
	if _, err := e.client().FinishWorkload(admin(), finish); code(err) != codes.InvalidArgument {
		t.Errorf("FinishWorkload for a reason that ends nothing: %v, want InvalidArgument", err)
	}
	if st, _ := e.state("x"); st != "admitted" {
		t.Errorf("refused ends changed workload x to %q", st)
	}
	if st, _ := e.state("y"); st != "" {
		t.Errorf("refused requests recorded workload y as %q", st)
	}
}
