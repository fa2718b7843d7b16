package admission_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	admapp "github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

func code(err error) codes.Code { return status.Code(err) }

// businessCode reads the ErrorInfo reason of a status.
func reason(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

func gpuQueue(cohort, gpus string) *quotav1.ClusterQueueSpec {
	return &quotav1.ClusterQueueSpec{Cohort: cohort, ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{"nvidia.com/gpu"},
		Flavors: []*quotav1.FlavorQuotas{{Name: "a100", Resources: []*quotav1.ResourceQuota{{Name: "nvidia.com/gpu", NominalQuota: gpus}}}}}}}
}

func TestEmbeddedDefaults(t *testing.T) {
	e := newEnv(t)
	waitFor(t, func() bool {
		r, err := e.client().ListClusterQueues(user("t1", "standard"), &quotav1.ListClusterQueuesRequest{})
		return err == nil && len(r.ClusterQueues) == 5
	})
	r, err := e.client().ListClusterQueues(user("t1", "standard"), &quotav1.ListClusterQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]string{"pipeline-onnx": "4", "pipeline-bie": "2", "pipeline-nef": "4"}
	for _, q := range r.ClusterQueues {
		if want, ok := caps[q.Name]; ok {
			// A pipeline stage's queue: its own cap, no cohort to borrow from.
			rq := q.Spec.GetResourceGroups()[0].GetFlavors()[0].GetResources()[0]
			if q.Origin != "config" || q.Spec.Cohort != "" || rq.GetName() != "taskmesh.io/"+q.Name || rq.GetNominalQuota() != want {
				t.Fatalf("pipeline queue %v", q)
			}
			// Answered with the policy in force, as a queue PUT without
			// one is (docs/api/quota.md).
			if p := q.Spec.GetPreemption(); q.Spec.GetQueueingStrategy() != "StrictFIFO" ||
				p.GetWithinClusterQueue() != "Never" || p.GetReclaimWithinCohort() != "Never" {
				t.Fatalf("pipeline queue %s answers strategy %q, preemption %v", q.Name, q.Spec.GetQueueingStrategy(), p)
			}
			delete(caps, q.Name)
			continue
		}
		p := q.Spec.GetPreemption()
		if q.Origin != "config" || q.Spec.Cohort != admission.DefaultCohort || p.GetMinPriorityGap() != 3 ||
			p.GetWithinClusterQueue() != "LowerPriority" || p.GetReclaimWithinCohort() != "Any" {
			t.Fatalf("default queue %v", q)
		}
	}
	if len(caps) > 0 {
		t.Fatalf("pipeline queues missing: %v", caps)
	}
	cs, err := e.client().ListCohorts(admin(), &quotav1.ListCohortsRequest{})
	if err != nil || len(cs.Cohorts) != 1 || len(cs.Cohorts[0].ClusterQueues) != 2 {
		t.Fatalf("cohorts = %v, %v", cs, err)
	}
	lqs, err := e.client().ListLocalQueues(admin(), &quotav1.ListLocalQueuesRequest{})
	if err != nil || len(lqs.LocalQueues) != 7 {
		t.Fatalf("local queues = %v, %v", lqs, err)
	}
	// A changed default survives a restart: defaults only fill gaps.
	if _, err := e.client().PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: admission.LowPriorityQueue,
		Spec: gpuQueue(admission.DefaultCohort, "3")}); err != nil {
		t.Fatal(err)
	}
	e.start()
	q, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: admission.LowPriorityQueue})
	if err != nil || q.ClusterQueue.Origin != "api" || q.ClusterQueue.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota != "3" {
		t.Fatalf("after restart: %v, %v", q, err)
	}
}

func TestDefinitionsAreForOperatorsAndValidated(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	count := func() int {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE aggregate_id LIKE 'cluster-queue/x%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		name string
		ctx  context.Context
		req  *quotav1.PutClusterQueueRequest
		want codes.Code
	}{
		{"tenant", user("t1", "premium"), &quotav1.PutClusterQueueRequest{Name: "x1", Spec: gpuQueue("", "1")}, codes.PermissionDenied},
		{"bad name", admin(), &quotav1.PutClusterQueueRequest{Name: "X_1", Spec: gpuQueue("", "1")}, codes.InvalidArgument},
		{"bad quantity", admin(), &quotav1.PutClusterQueueRequest{Name: "x2", Spec: gpuQueue("", "lots")}, codes.InvalidArgument},
		{"flavor misses a covered resource", admin(), &quotav1.PutClusterQueueRequest{Name: "x4", Spec: &quotav1.ClusterQueueSpec{
			ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{"nvidia.com/gpu", "cpu"},
				Flavors: []*quotav1.FlavorQuotas{{Name: "f", Resources: []*quotav1.ResourceQuota{{Name: "nvidia.com/gpu", NominalQuota: "1"}}}}}}}},
			codes.InvalidArgument},
		{"lending limit without cohort", admin(), &quotav1.PutClusterQueueRequest{Name: "x5", Spec: &quotav1.ClusterQueueSpec{
			ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{"nvidia.com/gpu"},
				Flavors: []*quotav1.FlavorQuotas{{Name: "f", Resources: []*quotav1.ResourceQuota{{Name: "nvidia.com/gpu", NominalQuota: "1",
					LendingLimit: new("1")}}}}}}}}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.PutClusterQueue(tt.ctx, tt.req)
			if code(err) != tt.want {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.want == codes.InvalidArgument && reason(err) != "INVALID_ARGUMENT" {
				t.Fatalf("reason = %q", reason(err))
			}
		})
	}
	if n := count(); n != 0 {
		t.Fatalf("%d events recorded by refused writes", n)
	}
	// As in Kueue, a queue may name a cohort that has no object: naming it
	// makes it (docs/api/quota.md#queue-admission).
	if _, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "x3", Spec: gpuQueue("implicit", "1")}); err != nil {
		t.Fatalf("a queue of a cohort without an object: %v", err)
	}
	if _, err := c.DeleteClusterQueue(admin(), &quotav1.DeleteClusterQueueRequest{Name: "x3"}); err != nil {
		t.Fatal(err)
	}
	before := count()

	// Deleting: unknown, in use by admitted work, a cohort with members.
	if _, err := c.DeleteClusterQueue(admin(), &quotav1.DeleteClusterQueueRequest{Name: "nope"}); code(err) != codes.NotFound {
		t.Fatalf("delete unknown: %v", err)
	}
	if _, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "x9", Spec: gpuQueue("", "1")}); err != nil {
		t.Fatal(err)
	}
	tk := &task{id: "busy", tenant: "t1", queue: "x9", priority: 5, gpus: "1"}
	e.submit(tk)
	e.waitState("busy", "admitted", 1)
	// Refusals carry the ErrorInfo of the code REST answers them with.
	if _, err := c.DeleteClusterQueue(user("t1", "premium"), &quotav1.DeleteClusterQueueRequest{Name: "x9"}); code(err) != codes.PermissionDenied || grpcserver.Code(err) != 403 {
		t.Fatalf("tenant delete: %v (code %d)", err, grpcserver.Code(err))
	}
	if _, err := c.DeleteClusterQueue(admin(), &quotav1.DeleteClusterQueueRequest{Name: "x9"}); code(err) != codes.FailedPrecondition || grpcserver.Code(err) != 30002 {
		t.Fatalf("delete busy queue: %v (code %d)", err, grpcserver.Code(err))
	}
	if _, err := c.DeleteCohort(admin(), &quotav1.DeleteCohortRequest{Name: admission.DefaultCohort}); code(err) != codes.FailedPrecondition {
		t.Fatalf("delete cohort with members: %v", err)
	}
	e.publish(tk, &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("busy", "finished", 1)
	if _, err := c.DeleteClusterQueue(admin(), &quotav1.DeleteClusterQueueRequest{Name: "x9"}); err != nil {
		t.Fatalf("delete idle queue: %v", err)
	}
	if got := count() - before; got != 2 {
		t.Fatalf("x9 events = %d, want defined and deleted", got)
	}
	// Work for a queue that does not exist waits, and says why.
	lost := &task{id: "lost", tenant: "t1", queue: "x9", priority: 5, gpus: "1"}
	e.submit(lost)
	e.waitState("lost", "pending", 1)
	ex, err := c.ExplainTaskAdmission(user("t1", "premium"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "lost"})
	if err != nil || ex.State != "pending" || !strings.Contains(ex.Reason, "x9") {
		t.Fatalf("explain lost = %v, %v", ex, err)
	}
	// Defining the queue again admits it.
	if _, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "x9", Spec: gpuQueue("", "1")}); err != nil {
		t.Fatal(err)
	}
	e.waitState("lost", "admitted", 1)
}

// A write's answer shows the usage of what it wrote, as a read right after
// it does: a new queue's flavors, a changed nominal quota, a new cohort.
func TestPutAnswersTheUsageOfWhatItWrote(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	// The loop's session has started: queues answer with their usage.
	waitFor(t, func() bool {
		r, err := c.GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: admission.LowPriorityQueue})
		return err == nil && len(r.ClusterQueue.GetFlavorsUsage()) > 0
	})
	usage := func(q *quotav1.ClusterQueue) string {
		var out []string
		for _, f := range q.GetFlavorsUsage() {
			for _, r := range f.GetResources() {
				out = append(out, f.GetName()+"/"+r.GetName()+" nominal "+r.GetNominalQuota()+" available "+r.GetAvailable())
			}
		}
		return strings.Join(out, "; ")
	}
	for _, gpus := range []string{"2", "5"} {
		r, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "fresh", Spec: gpuQueue("", gpus)})
		if err != nil {
			t.Fatal(err)
		}
		want := "a100/nvidia.com/gpu nominal " + gpus + " available " + gpus
		if got := usage(r.ClusterQueue); got != want {
			t.Fatalf("put %s GPUs answers usage %q, want %q", gpus, got, want)
		}
		g, err := c.GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "fresh"})
		if err != nil || usage(g.ClusterQueue) != want {
			t.Fatalf("get after put = %v, %v", g, err)
		}
	}
	if _, err := c.PutCohort(admin(), &quotav1.PutCohortRequest{Name: "lenders", Spec: &quotav1.CohortSpec{}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "fresh", Spec: gpuQueue("lenders", "3")})
	if err != nil {
		t.Fatal(err)
	}
	if got := usage(r.ClusterQueue); got != "a100/nvidia.com/gpu nominal 3 available 3" {
		t.Fatalf("moved to a cohort: usage %q", got)
	}
	ch, err := c.PutCohort(admin(), &quotav1.PutCohortRequest{Name: "lenders", Spec: &quotav1.CohortSpec{}})
	if err != nil || len(ch.Cohort.GetFlavorsUsage()) != 1 || ch.Cohort.GetFlavorsUsage()[0].GetResources()[0].GetAvailable() != "3" {
		t.Fatalf("cohort put = %v, %v", ch, err)
	}
}

func TestExplainTaskAdmission(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "1")
	a := &task{id: "first", tenant: "t1", queue: "solo", priority: 5, gpus: "1"}
	b := &task{id: "second", tenant: "t1", queue: "solo", priority: 5, gpus: "1"}
	e.submit(a)
	e.waitState("first", "admitted", 1)
	e.submit(b)
	e.waitState("second", "pending", 1)
	c := e.client()
	ex, err := c.ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "second"})
	if err != nil || ex.State != "pending" || ex.Position != 1 || ex.ClusterQueue != "solo" || len(ex.Shortages) != 1 ||
		ex.Shortages[0].Requested != "1" || ex.Shortages[0].Available != "0" {
		t.Fatalf("explain second = %v, %v", ex, err)
	}
	// The sentence says what the fields say: the head of the queue is
	// position 1, and one GPU is 1 (docs/api/quota.md#explaining-a-wait).
	if want := "position 1 in solo: a100/nvidia.com/gpu: requested 1, available 0 (nominal 1, borrowable 0)"; ex.Reason != want {
		t.Fatalf("explain second's reason = %q, want %q", ex.Reason, want)
	}
	ex, err = c.ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "first"})
	if err != nil || ex.State != "admitted" || ex.Flavors["nvidia.com/gpu"] != "a100" || ex.AdmittedAt == nil {
		t.Fatalf("explain first = %v, %v", ex, err)
	}
	// An unknown task is 30004 over gRPC too, as REST answers it.
	for _, id := range []string{"second", "nothing"} {
		_, err := c.ExplainTaskAdmission(user("t2", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: id})
		if code(err) != codes.NotFound || grpcserver.Code(err) != 30004 || reason(err) != "TASK_NOT_FOUND" {
			t.Fatalf("another tenant's %s: %v (code %d)", id, err, grpcserver.Code(err))
		}
	}
	if _, err := c.ExplainTaskAdmission(admin(), &quotav1.ExplainTaskAdmissionRequest{TaskId: "second"}); err != nil {
		t.Fatalf("operator: %v", err)
	}

	// A task whose ClusterQueue is deleted while it waits is told so.
	e.soloQueue("gone", "1")
	big := &task{id: "big", tenant: "t1", queue: "gone", priority: 5, gpus: "2"}
	e.submit(big)
	e.waitState("big", "pending", 1)
	if _, err := c.DeleteClusterQueue(admin(), &quotav1.DeleteClusterQueueRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	want := "cluster queue gone does not exist; the task waits until a cluster queue of that name is defined"
	waitFor(t, func() bool {
		ex, err := c.ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "big"})
		return err == nil && ex.State == "pending" && ex.Position == 0 && ex.Reason == want && len(ex.Shortages) == 0
	})
}

// guQuotas is a fake GU quota check: running WorkGroups by tenant/quota,
// and the quota service's errors otherwise.
type guQuotas map[string]admission.WorkGroup

func (g guQuotas) CheckGUQuota(_ context.Context, tenant, quota string) (admission.WorkGroup, error) {
	if quota == "creating" {
		return admission.WorkGroup{}, guStatus(codes.FailedPrecondition, "GU_QUOTA_CREATING")
	}
	wg, ok := g[tenant+"/"+quota]
	if !ok {
		return admission.WorkGroup{}, guStatus(codes.NotFound, "GU_QUOTA_NOT_EXISTS")
	}
	return wg, nil
}

func guStatus(c codes.Code, r string) error {
	st, _ := status.New(c, strings.ToLower(r)).WithDetails(&errdetails.ErrorInfo{Reason: r, Domain: "taskmesh"})
	return st.Err()
}

func TestResolveQueue(t *testing.T) {
	gu := guQuotas{"t1/q1": {TenantID: "t1", Quota: "q1", MachineType: "a100", GPUs: 4}}
	e := newEnv(t, func(c *admission.Config) { c.GUQuotas = gu })
	gpu := map[string]string{"nvidia.com/gpu": "1"}
	tests := []struct {
		name       string
		ctx        context.Context
		req        *quotav1.ResolveQueueRequest
		want       string
		wantCode   codes.Code
		wantReason string
	}{
		{"premium GPU work", user("t1", "premium"), &quotav1.ResolveQueueRequest{Resources: gpu}, admission.HighPriorityQueue, codes.OK, ""},
		{"standard GPU work", user("t1", "standard"), &quotav1.ResolveQueueRequest{Resources: gpu}, admission.LowPriorityQueue, codes.OK, ""},
		{"unknown tier", user("t1", ""), &quotav1.ResolveQueueRequest{Resources: gpu}, admission.LowPriorityQueue, codes.OK, ""},
		{"no resources", user("t1", "premium"), &quotav1.ResolveQueueRequest{}, "", codes.OK, ""},
		{"CPU only", user("t1", "premium"), &quotav1.ResolveQueueRequest{Resources: map[string]string{"cpu": "2"}}, "", codes.OK, ""},
		{"alias", user("t1", "premium"), &quotav1.ResolveQueueRequest{Queue: "premium"}, admission.HighPriorityQueue, codes.OK, ""},
		{"named queue of another tier", user("t1", "standard"), &quotav1.ResolveQueueRequest{Queue: admission.HighPriorityQueue}, "", codes.PermissionDenied, ""},
		{"operator any queue", admin(), &quotav1.ResolveQueueRequest{Queue: admission.HighPriorityQueue}, admission.HighPriorityQueue, codes.OK, ""},
		{"unknown queue", user("t1", "premium"), &quotav1.ResolveQueueRequest{Queue: "nope"}, "", codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"bad quantity", user("t1", "premium"), &quotav1.ResolveQueueRequest{Resources: map[string]string{"nvidia.com/gpu": "x"}}, "", codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"running GU quota", user("t1", "standard"), &quotav1.ResolveQueueRequest{Quota: "q1", Resources: gpu}, "gu-t1-q1", codes.OK, ""},
		{"missing GU quota", user("t1", "standard"), &quotav1.ResolveQueueRequest{Quota: "q2", Resources: gpu}, "", codes.NotFound, "GU_QUOTA_NOT_EXISTS"},
		{"GU quota of another tenant", user("t2", "standard"), &quotav1.ResolveQueueRequest{Quota: "q1", Resources: gpu}, "", codes.NotFound, "GU_QUOTA_NOT_EXISTS"},
		{"GU quota being created", user("t1", "standard"), &quotav1.ResolveQueueRequest{Quota: "creating", Resources: gpu}, "", codes.FailedPrecondition, "GU_QUOTA_CREATING"},
		// Work its queue could never admit, refused as an unknown queue is.
		{"a queue whose cluster queue was deleted", user("t1", "standard"), &quotav1.ResolveQueueRequest{Queue: "orphan", Resources: gpu}, "", codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"a resource the default queue has no quota for", user("t1", "standard"), &quotav1.ResolveQueueRequest{Resources: map[string]string{"amd.com/gpu": "1"}}, "", codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"a resource a GU quota has no quota for", user("t1", "standard"), &quotav1.ResolveQueueRequest{Quota: "q1", Resources: map[string]string{"nvidia.com/gpu": "1", "cpu": "2"}}, "", codes.InvalidArgument, "INVALID_ARGUMENT"},
	}
	waitFor(t, func() bool {
		_, err := e.client().ResolveQueue(user("t1", "premium"), &quotav1.ResolveQueueRequest{Queue: "premium"})
		return err == nil
	})
	// A LocalQueue left behind by its ClusterQueue.
	e.soloQueue("orphaned", "1")
	if _, err := e.client().PutLocalQueue(admin(), &quotav1.PutLocalQueueRequest{Name: "orphan",
		Spec: &quotav1.LocalQueueSpec{ClusterQueue: "orphaned"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client().DeleteClusterQueue(admin(), &quotav1.DeleteClusterQueueRequest{Name: "orphaned"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.client().ResolveQueue(tt.ctx, tt.req)
			if code(err) != tt.wantCode || r.GetClusterQueue() != tt.want {
				t.Fatalf("ResolveQueue = %q, %v; want %q, %v", r.GetClusterQueue(), err, tt.want, tt.wantCode)
			}
			if tt.wantReason != "" && reason(err) != tt.wantReason {
				t.Fatalf("reason = %q, want %q", reason(err), tt.wantReason)
			}
		})
	}
	// Without a GU quota dependency, naming a quota is refused clearly.
	e.start()
	if _, err := e.client().ResolveQueue(user("t1", "standard"), &quotav1.ResolveQueueRequest{Quota: "q1"}); code(err) != codes.InvalidArgument {
		t.Fatalf("no GU quotas: %v", err)
	}
}

// The WorkGroup queues follow the WorkGroups at once
// (docs/api/quota.md#workgroup-queues): a queue whose WorkGroup stops
// running admits nothing new — its admitted work runs on, its pending work
// stays pending, saying why — and goes with its last admitted workload.
func TestSyncWorkGroups(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	wg := admission.WorkGroup{TenantID: "t1", Quota: "q1", MachineType: "h100", GPUs: 2, Status: "Running"}
	if err := e.svc.SyncWorkGroups(ctx, []admission.WorkGroup{wg}); err != nil {
		t.Fatal(err)
	}
	q, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "gu-t1-q1"})
	if err != nil || q.ClusterQueue.Origin != "work_group" ||
		q.ClusterQueue.Spec.ResourceGroups[0].Flavors[0].Name != "h100" ||
		q.ClusterQueue.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota != "2" ||
		q.ClusterQueue.Spec.GetPreemption().GetReclaimWithinCohort() != "Never" || q.ClusterQueue.Closing != "" {
		t.Fatalf("work group queue = %v, %v", q, err)
	}
	tk := &task{id: "gu-task", tenant: "t1", queue: "gu-t1-q1", priority: 5, gpus: "2"}
	e.submit(tk)
	e.waitState("gu-task", "admitted", 1)
	behind := &task{id: "gu-behind", tenant: "t1", queue: "gu-t1-q1", priority: 5, gpus: "1"}
	e.submit(behind)
	e.waitState("gu-behind", "pending", 1)

	// The WorkGroup is being deleted while the first runs: the queue is
	// closed at once, its quota 0, and says why.
	wg.Status = "Deleting"
	if err := e.svc.SyncWorkGroups(ctx, []admission.WorkGroup{wg}); err != nil {
		t.Fatal(err)
	}
	q, err = e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "gu-t1-q1"})
	if err != nil || q.ClusterQueue.Closing != "its GU quota was deleted" ||
		q.ClusterQueue.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota != "0" {
		t.Fatalf("busy work group queue = %v, %v; want it closed with nominal 0", q, err)
	}
	waitFor(t, func() bool {
		q, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "gu-t1-q1"})
		u := q.GetClusterQueue().GetFlavorsUsage()
		return err == nil && len(u) == 1 && u[0].Resources[0].NominalQuota == "0" && q.ClusterQueue.AdmittedWorkloads == 1
	})
	ex, err := e.client().ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "gu-behind"})
	if want := "position 1 in gu-t1-q1, which admits nothing new: its GU quota was deleted"; err != nil ||
		ex.State != "pending" || ex.Position != 1 || ex.Reason != want {
		t.Fatalf("explain the waiting task = %v, %v; want reason %q", ex, err, want)
	}
	// Work of a priority that would preempt it in an open queue does not
	// in a closed one: there is no quota to make room in.
	urgent := &task{id: "gu-urgent", tenant: "t1", queue: "gu-t1-q1", priority: 1, gpus: "1"}
	e.submit(urgent)
	e.waitState("gu-urgent", "pending", 1)
	e.publish(urgent, &taskv1.TaskDeleted{})
	// It ends, and what waited is not admitted: the queue goes with its
	// last admitted workload, without a sync.
	if st, _ := e.state("gu-task"); st != "admitted" {
		t.Fatalf("the running task is %q, want admitted", st)
	}
	e.publish(tk, &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("gu-task", "finished", 1)
	waitFor(t, func() bool {
		_, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "gu-t1-q1"})
		return code(err) == codes.NotFound
	})
	if st, _ := e.state("gu-behind"); st != "pending" {
		t.Fatalf("the waiting task is %q, want pending", st)
	}
	if got, want := e.events("gu-behind"), []string{"WorkloadQueued"}; !slices.Equal(got, want) {
		t.Fatalf("the waiting task's events = %v, want %v", got, want)
	}
	ex, err = e.client().ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "gu-behind"})
	if err != nil || ex.State != "pending" || ex.Position != 0 || !strings.Contains(ex.Reason, "cluster queue gu-t1-q1 does not exist: its GU quota was deleted") {
		t.Fatalf("explain the waiting task after its queue went = %v, %v", ex, err)
	}
	// A GU quota of that name running again admits it.
	wg.Status = "Running"
	if err := e.svc.SyncWorkGroups(ctx, []admission.WorkGroup{wg}); err != nil {
		t.Fatal(err)
	}
	e.waitState("gu-behind", "admitted", 1)
	// An idle queue whose WorkGroup is gone is deleted at once.
	e.publish(behind, &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("gu-behind", "finished", 1)
	if err := e.svc.SyncWorkGroups(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "gu-t1-q1"}); code(err) != codes.NotFound {
		t.Fatalf("idle work group queue kept: %v", err)
	}
	// Operator queues are never touched by a sync.
	if _, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: admission.HighPriorityQueue}); err != nil {
		t.Fatal(err)
	}
}

// A tenant's key lists and reads the shared queues and its own WorkGroup
// queues, never another tenant's: those are left out of its lists and
// answered as an unknown name is (docs/api/quota.md#workgroup-queues).
func TestTenantsSeeNoOtherTenantsWorkGroupQueues(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	groups := []admission.WorkGroup{{TenantID: "t1", Quota: "q1", MachineType: "h100", GPUs: 2, Status: "Running"},
		{TenantID: "t-2", Quota: "q1", MachineType: "h100", GPUs: 1, Status: "Running"}}
	if err := e.svc.SyncWorkGroups(ctx, groups); err != nil {
		t.Fatal(err)
	}
	t1Q, t2Q := admapp.WorkGroupQueue("t1", "q1"), admapp.WorkGroupQueue("t-2", "q1")
	if _, err := e.client().PutLocalQueue(admin(), &quotav1.PutLocalQueueRequest{Name: "t2-team",
		Spec: &quotav1.LocalQueueSpec{ClusterQueue: t2Q, Tenants: []string{"t-2"}}}); err != nil {
		t.Fatal(err)
	}
	listed := func(ctx context.Context) map[string]bool {
		t.Helper()
		r, err := e.client().ListClusterQueues(ctx, &quotav1.ListClusterQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, q := range r.ClusterQueues {
			out[q.Name] = true
		}
		lqs, err := e.client().ListLocalQueues(ctx, &quotav1.ListLocalQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range lqs.LocalQueues {
			out["local/"+q.Name] = true
		}
		return out
	}
	ops, t1, t2 := listed(admin()), listed(user("t1", "standard")), listed(user("t-2", "standard"))
	if !ops[t1Q] || !ops[t2Q] || !ops["local/t2-team"] {
		t.Errorf("the operator lists %v, want both WorkGroup queues and t2-team", ops)
	}
	if !t1[t1Q] || t1[t2Q] || t1["local/t2-team"] || !t1[admission.HighPriorityQueue] {
		t.Errorf("t1 lists %v, want its own queue and the shared ones, not t-2's", t1)
	}
	if !t2[t2Q] || t2[t1Q] || !t2["local/t2-team"] {
		t.Errorf("t-2 lists %v, want its own queues, not t1's", t2)
	}
	for _, tc := range []struct{ tenant, other string }{{"t1", t2Q}, {"t-2", t1Q}} {
		_, err := e.client().GetClusterQueue(user(tc.tenant, "standard"), &quotav1.GetClusterQueueRequest{Name: tc.other})
		_, none := e.client().GetClusterQueue(user(tc.tenant, "standard"), &quotav1.GetClusterQueueRequest{Name: "gu-nobody-q9"})
		got := strings.ReplaceAll(status.Convert(err).Message(), tc.other, "<name>")
		want := strings.ReplaceAll(status.Convert(none).Message(), "gu-nobody-q9", "<name>")
		if code(err) != codes.NotFound || code(none) != codes.NotFound || reason(err) != reason(none) || got != want {
			t.Errorf("%s reads %s: %v; an unknown name: %v; want the same answer", tc.tenant, tc.other, err, none)
		}
	}
	for _, tc := range []struct{ tenant, own string }{{"t1", t1Q}, {"t-2", t2Q}} {
		if q, err := e.client().GetClusterQueue(user(tc.tenant, "standard"), &quotav1.GetClusterQueueRequest{Name: tc.own}); err != nil ||
			q.ClusterQueue.Origin != "work_group" {
			t.Errorf("%s reads its own %s: %v, %v", tc.tenant, tc.own, q, err)
		}
	}
}

// A standby instance (its loop waits for the lock) still answers from the
// recorded state.
func TestStandbyInstanceExplainsFromRecords(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "1")
	tk := &task{id: "rec", tenant: "t1", queue: "solo", priority: 5, gpus: "1"}
	e.submit(tk)
	e.waitState("rec", "admitted", 1)
	_, conn, stop := e.instance(e.open())
	defer stop()
	c := quotav1.NewAdmissionServiceClient(conn)
	ex, err := c.ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "rec"})
	if err != nil || ex.State != "admitted" || ex.ClusterQueue != "solo" || ex.Flavors["nvidia.com/gpu"] != "a100" {
		t.Fatalf("standby explain = %v, %v", ex, err)
	}
	if _, err := c.ExplainTaskAdmission(user("t2", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "rec"}); code(err) != codes.NotFound {
		t.Fatalf("standby, another tenant: %v", err)
	}
	q, err := c.GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "solo"})
	if err != nil || q.ClusterQueue.Spec == nil {
		t.Fatalf("standby get = %v, %v", q, err)
	}
}

// Concurrent puts of one queue all land, each the next version of its
// aggregate. A definition write locks the definitions before its first
// write, so one that waited takes its transaction id after the write it
// waited for, and the event store accepts its event (decision 0122).
func TestConcurrentDefinitionPutsAllLand(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	const writers, each = 6, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				gpus := fmt.Sprint(1 + w*each + i)
				if _, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "contended", Spec: gpuQueue("", gpus)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("PutClusterQueue: %v", err)
	}
	var n, last int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*), coalesce(max(version), 0) FROM events
		WHERE aggregate_id = 'cluster-queue/contended'`).Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	if n != writers*each || last != writers*each {
		t.Errorf("cluster-queue/contended has %d events up to version %d, want %d", n, last, writers*each)
	}
}
