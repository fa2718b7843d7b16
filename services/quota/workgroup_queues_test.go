package quota_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota"
)

// A GU quota's WorkGroup queue follows the WorkGroup through both layers
// of the quota process (docs/api/quota.md#workgroup-queues): once the
// quota is deleted the queue admits nothing new, so GPUs given back to the
// inventory are never handed out a second time; what it admitted runs to
// its end, what waited stays pending saying why, and the queue goes with
// its last admitted workload. The scheduler's side is played by its calls:
// QueueWorkload for a new task, FinishWorkload for one that ended.
func TestDeletedGUQuotasQueueAdmitsNothingMore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gpus  int64
		tasks int
	}{
		{"one GPU, two tasks", 1, 2},
		{"four GPUs, a backlog", 4, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newQuotaServer(t)
			ctx := operator()
			if _, err := s.quotas.RegisterTenant(ctx, &quotav1.RegisterTenantRequest{TenantId: "demo", Name: "Demo"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.quotas.CreateCluster(ctx, &quotav1.CreateClusterRequest{Name: "local"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.quotas.SetInventory(ctx, &quotav1.SetInventoryRequest{Cluster: "local", MachineType: "A100", TotalGpus: 16}); err != nil {
				t.Fatal(err)
			}
			created, err := s.quotas.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "demo", Cluster: "local",
				Kind: "GU", Spec: &quotav1.QuotaSpec{Name: "qagq", MinUnits: int32(tc.gpus), MaxUnits: int32(tc.gpus), MachineType: "A100"}})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetQuota().GetId()
			const queue = "gu-demo-qagq-default"
			gpus := fmt.Sprint(tc.gpus)
			waitFor(t, "the WorkGroup's queue", func() bool {
				q, err := s.queues.GetClusterQueue(ctx, &quotav1.GetClusterQueueRequest{Name: queue})
				u := q.GetClusterQueue().GetFlavorsUsage()
				return err == nil && len(u) == 1 && u[0].GetResources()[0].GetNominalQuota() == gpus
			})
			if r, err := s.queues.ResolveQueue(tenantKey("demo"), &quotav1.ResolveQueueRequest{Quota: "qagq",
				Resources: map[string]string{"nvidia.com/gpu": "1"}}); err != nil || r.GetClusterQueue() != queue {
				t.Fatalf("ResolveQueue = %v, %v; want %s", r, err, queue)
			}

			// One GPU per task: the first gpus are admitted, the rest wait.
			for i := range tc.tasks {
				res := s.queueWorkload(t, fmt.Sprintf("gq-%d", i), queue)
				if want := i < int(tc.gpus); res.GetAdmitted() != want {
					t.Fatalf("task %d admitted = %v, want %v", i, res.GetAdmitted(), want)
				}
			}

			// The quota is deleted while its work runs: by the time
			// DeleteQuota answers, its queue admits nothing new.
			if _, err := s.quotas.DeleteQuota(ctx, &quotav1.DeleteQuotaRequest{QuotaId: id}); err != nil {
				t.Fatal(err)
			}
			if q, err := s.queues.GetClusterQueue(ctx, &quotav1.GetClusterQueueRequest{Name: queue}); err != nil ||
				q.GetClusterQueue().GetClosing() == "" {
				t.Fatalf("the queue as DeleteQuota answered = %v, %v; want it closed", q, err)
			}
			waitFor(t, "the quota to be deleted and its GPUs given back", func() bool {
				q, err := s.quotas.GetQuota(ctx, &quotav1.GetQuotaRequest{QuotaId: id})
				inv, ierr := s.quotas.GetInventory(ctx, &quotav1.GetInventoryRequest{Cluster: "local"})
				return err == nil && ierr == nil && q.GetQuota().GetStatus() == "Deleted" &&
					len(inv.GetInventory()) == 1 && inv.GetInventory()[0].GetAvailableGpus() == 16
			})
			q, err := s.queues.GetClusterQueue(ctx, &quotav1.GetClusterQueueRequest{Name: queue})
			if err != nil || q.GetClusterQueue().GetClosing() != "its GU quota was deleted" ||
				q.GetClusterQueue().GetSpec().GetResourceGroups()[0].GetFlavors()[0].GetResources()[0].GetNominalQuota() != "0" ||
				q.GetClusterQueue().GetAdmittedWorkloads() != int32(tc.gpus) {
				t.Fatalf("the deleted quota's queue = %v, %v; want it closed, nominal 0, its admitted work kept", q, err)
			}
			// New work naming the quota is refused.
			if _, err := s.queues.ResolveQueue(tenantKey("demo"), &quotav1.ResolveQueueRequest{Quota: "qagq",
				Resources: map[string]string{"nvidia.com/gpu": "1"}}); status.Code(err) != codes.NotFound {
				t.Fatalf("ResolveQueue of the deleted quota = %v, want NotFound", err)
			}
			waiting := fmt.Sprintf("gq-%d", tc.gpus)
			ex, err := s.queues.ExplainTaskAdmission(tenantKey("demo"), &quotav1.ExplainTaskAdmissionRequest{TaskId: waiting})
			if want := queue + ", which admits nothing new: its GU quota was deleted"; err != nil || ex.GetState() != "pending" ||
				ex.GetPosition() != 1 || ex.GetReason() != "position 1 in "+want {
				t.Fatalf("explain %s = %v, %v", waiting, ex, err)
			}

			// The running work ends, one task after another: nothing that
			// waited is admitted.
			for i := range int(tc.gpus) {
				fin, err := s.queues.FinishWorkload(ctx, &quotav1.FinishWorkloadRequest{TaskId: fmt.Sprintf("gq-%d", i), TaskVersion: 2,
					TenantId: "demo", Reason: "succeeded"})
				if err != nil || len(fin.GetAdmitted()) != 0 {
					t.Fatalf("FinishWorkload gq-%d = %v, %v; want nothing admitted", i, fin, err)
				}
			}
			// The queue goes with its last admitted workload.
			waitFor(t, "the queue to go", func() bool {
				_, err := s.queues.GetClusterQueue(ctx, &quotav1.GetClusterQueueRequest{Name: queue})
				return status.Code(err) == codes.NotFound
			})
			for i := int(tc.gpus); i < tc.tasks; i++ {
				ex, err := s.queues.ExplainTaskAdmission(tenantKey("demo"), &quotav1.ExplainTaskAdmissionRequest{TaskId: fmt.Sprintf("gq-%d", i)})
				if err != nil || ex.GetState() != "pending" || ex.GetPosition() != 0 ||
					!strings.HasPrefix(ex.GetReason(), "cluster queue "+queue+" does not exist: its GU quota was deleted") {
					t.Fatalf("explain gq-%d once the queue went = %v, %v", i, ex, err)
				}
			}
		})
	}
}

// quotaServer is the quota process (both layers, quota.NewServer) over a
// fresh database and broker, with a quick in-process operator.
type quotaServer struct {
	quotas quotav1.QuotaServiceClient
	queues quotav1.AdmissionServiceClient
}

func newQuotaServer(t *testing.T) *quotaServer {
	t.Helper()
	cfg := serverConfig(pgtest.New(t), kafkatest.New(t, kafkatest.WithPartitions(2)))
	cfg.Service.OperatorDelay, cfg.Service.PassInterval = 20*time.Millisecond, 10*time.Millisecond
	cfg.Admission.Tick = 20 * time.Millisecond
	srv, err := quota.NewServer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("quota server: %v", err)
		}
	})
	return &quotaServer{quotas: quotav1.NewQuotaServiceClient(conn), queues: quotav1.NewAdmissionServiceClient(conn)}
}

// queueWorkload hands the admission loop a new one-GPU task of tenant demo
// in queue, as the scheduler does once it stored the task; again while the
// loop's first session has not started.
func (s *quotaServer) queueWorkload(t *testing.T, id, queue string) *quotav1.QueueWorkloadResponse {
	t.Helper()
	req := &quotav1.QueueWorkloadRequest{TaskId: id, TaskVersion: 1, TenantId: "demo", ClusterQueue: queue, Priority: 5,
		CreatedAt: timestamppb.Now(), Resources: map[string]string{"nvidia.com/gpu": "1"}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := s.queues.QueueWorkload(operator(), req)
		if status.Code(err) == codes.Unavailable && time.Now().Before(deadline) {
			continue
		}
		if err != nil {
			t.Fatalf("QueueWorkload %s: %v", id, err)
		}
		return res
	}
}

// Tenant ids may hold '-', so ⟨x, y-w⟩ and ⟨x-y, w⟩ spelled out with '-'
// read the same. Two such tenants' GU quotas get a WorkGroup queue each,
// with their own GPUs, and two such ⟨tenant, cluster⟩ pairs a Ray cluster
// each (docs/decisions/0106-names-scoped-to-a-tenant-are-unambiguous.md).
func TestTenantsWhoseNamesRunTogetherShareNothing(t *testing.T) {
	s := newQuotaServer(t)
	ctx := operator()
	for _, tenant := range []string{"x", "x-y"} {
		if _, err := s.quotas.RegisterTenant(ctx, &quotav1.RegisterTenantRequest{TenantId: tenant, Name: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cluster := range []string{"local", "y-local"} {
		if _, err := s.quotas.CreateCluster(ctx, &quotav1.CreateClusterRequest{Name: cluster}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.quotas.SetInventory(ctx, &quotav1.SetInventoryRequest{Cluster: cluster, MachineType: "A100", TotalGpus: 8}); err != nil {
			t.Fatal(err)
		}
	}
	// x's quota y-w on y-local and x-y's quota w on local: with '-' between
	// the parts, both queues would be gu-x-y-w-default and both Ray
	// clusters ray-x-y-local.
	owners := []struct {
		tenant, cluster, quota string
		gpus                   int32
	}{{"x", "y-local", "y-w", 2}, {"x-y", "local", "w", 3}}
	queues := map[string]bool{}
	rays := map[string]bool{}
	for _, o := range owners {
		if _, err := s.quotas.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: o.tenant, Cluster: o.cluster, Kind: "GU",
			Spec: &quotav1.QuotaSpec{Name: o.quota, MinUnits: o.gpus, MaxUnits: o.gpus, MachineType: "A100"}}); err != nil {
			t.Fatalf("%s's quota %s: %v", o.tenant, o.quota, err)
		}
	}
	for _, o := range owners {
		var queue string
		waitFor(t, o.tenant+"'s WorkGroup queue", func() bool {
			r, err := s.queues.ResolveQueue(tenantKey(o.tenant), &quotav1.ResolveQueueRequest{Quota: o.quota,
				Resources: map[string]string{"nvidia.com/gpu": "1"}})
			queue = r.GetClusterQueue()
			return err == nil
		})
		waitFor(t, queue+" with "+o.tenant+"'s GPUs", func() bool {
			q, err := s.queues.GetClusterQueue(ctx, &quotav1.GetClusterQueueRequest{Name: queue})
			u := q.GetClusterQueue().GetFlavorsUsage()
			return err == nil && len(u) == 1 && u[0].GetResources()[0].GetNominalQuota() == fmt.Sprint(o.gpus)
		})
		queues[queue] = true
		ray, err := s.quotas.GetRayCluster(ctx, &quotav1.GetRayClusterRequest{TenantId: o.tenant, Cluster: o.cluster})
		if err != nil {
			t.Fatal(err)
		}
		rays[ray.GetRayCluster().GetName()] = true
	}
	if len(queues) != 2 || len(rays) != 2 {
		t.Fatalf("WorkGroup queues %v and Ray clusters %v: want two of each, one per tenant", queues, rays)
	}
	// A tenant's work on its quota waits for its own GPUs only: x-y's three
	// taken, x's two still admit.
	for _, o := range owners {
		for i := range int(o.gpus) {
			r, _ := s.queues.ResolveQueue(tenantKey(o.tenant), &quotav1.ResolveQueueRequest{Quota: o.quota,
				Resources: map[string]string{"nvidia.com/gpu": "1"}})
			res, err := s.queues.QueueWorkload(ctx, &quotav1.QueueWorkloadRequest{TaskId: fmt.Sprintf("%s-%d", o.tenant, i), TaskVersion: 1,
				TenantId: o.tenant, ClusterQueue: r.GetClusterQueue(), Priority: 5, CreatedAt: timestamppb.Now(),
				Resources: map[string]string{"nvidia.com/gpu": "1"}})
			if err != nil || !res.GetAdmitted() {
				t.Fatalf("%s's task %d on its own quota = %v, %v; want admitted", o.tenant, i, res, err)
			}
		}
	}
}
