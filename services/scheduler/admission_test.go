package scheduler_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// fakeAdmission stands in for the quota service's ResolveQueue: it maps
// queue names to ClusterQueues, fails on demand, and records who asked.
type fakeAdmission struct {
	quotav1.UnimplementedAdmissionServiceServer
	mu     sync.Mutex
	err    error
	asked  []authn.Principal
	queues map[string]string
}

func (f *fakeAdmission) ResolveQueue(ctx context.Context, req *quotav1.ResolveQueueRequest) (*quotav1.ResolveQueueResponse, error) {
	p, _ := authn.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, p)
	if f.err != nil {
		return nil, f.err
	}
	return &quotav1.ResolveQueueResponse{ClusterQueue: f.queues[req.GetQueue()]}, nil
}

// admissionEnv is a scheduler wired to a fake quota service (gRPC) and to
// the quota topic on the real broker, where the test plays the quota
// service's decisions.
type admissionEnv struct {
	*env
	quota    *fakeAdmission
	producer *kgo.Client
}

func newAdmissionEnv(t *testing.T, mutate ...func(*scheduler.Config)) *admissionEnv {
	t.Helper()
	fake := &fakeAdmission{queues: map[string]string{"premium": "tenant-high-priority-queue"}}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		t.Fatal(err)
	}
	quotav1.RegisterAdmissionServiceServer(srv, fake)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := newEnv(t, append([]func(*scheduler.Config){func(c *scheduler.Config) { c.Quota, c.InternalToken = conn, internalToken }},
		mutate...)...)
	opts, err := e.broker.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(scheduler.QuotaTopic))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	return &admissionEnv{env: e, quota: fake, producer: producer}
}

// decide publishes a quota event the way the quota service's relay does.
func (e *admissionEnv) decide(aggregate string, ev *quotav1.QuotaEvent) {
	e.t.Helper()
	ev.AggregateId = aggregate
	b, err := proto.Marshal(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.producer.ProduceSync(context.Background(), &kgo.Record{Key: []byte(aggregate), Value: b}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *admissionEnv) get(id string) *taskv1.Task {
	e.t.Helper()
	resp, err := e.tasks().GetTask(user("acme"), &taskv1.GetTaskRequest{Id: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.GetTask()
}

func TestAdmissionGatesClaimsUntilTheQuotaServiceAdmits(t *testing.T) {
	e := newAdmissionEnv(t)
	premium := as(authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: "key-acme", Tier: "premium"})
	task := e.create(premium, &taskv1.TaskSpec{Name: "gpu", Command: "train", Queue: "premium",
		Resources: map[string]string{"nvidia.com/gpu": "2"}})
	if task.GetClusterQueue() != "tenant-high-priority-queue" || task.GetAdmitted() || task.GetStatus() != "pending" {
		t.Fatalf("created = %v", task)
	}
	if p := e.quota.asked[0]; p.TenantID != "acme" || p.Tier != "premium" || p.Kind != authn.KindUser {
		t.Errorf("quota service asked by %+v, want the submitting tenant and tier", p)
	}
	// A plain task never asks the quota service and is claimable at once.
	plain := e.create(user("acme"), &taskv1.TaskSpec{Name: "plain", Command: "echo"})
	if got := e.claim("agent-1", "m-1", 10); len(got) != 1 || got[0].GetId() != plain.GetId() {
		t.Fatalf("claim = %v, want only the plain task", got)
	}
	if len(e.quota.asked) != 1 {
		t.Errorf("quota service asked %d times, want once", len(e.quota.asked))
	}

	// A decision about another stay in the queue changes nothing.
	e.decide("workload/"+task.GetId(), &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadAdmitted{
		WorkloadAdmitted: &quotav1.WorkloadAdmitted{TaskId: task.GetId(), ClusterQueue: "tenant-high-priority-queue", TaskVersion: 7}}})
	e.decide("workload/"+task.GetId(), &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadAdmitted{
		WorkloadAdmitted: &quotav1.WorkloadAdmitted{TaskId: task.GetId(), ClusterQueue: "tenant-high-priority-queue",
			TaskVersion: 1, Flavors: map[string]string{"nvidia.com/gpu": "default-flavor"}}}})
	eventually(t, 10*time.Second, "admission", func() bool { return e.get(task.GetId()).GetAdmitted() })
	if v := e.get(task.GetId()).GetVersion(); v != 2 {
		t.Errorf("version after admission = %d, want 2 (the stale decision recorded nothing)", v)
	}
	got := e.claim("agent-1", "m-1", 10)
	if len(got) != 1 || got[0].GetId() != task.GetId() {
		t.Fatalf("claim after admission = %v", got)
	}
	attempt := got[0].GetAttemptId()
	if _, err := e.leases().StartTask(agent("agent-1"), &taskv1.StartTaskRequest{TaskId: task.GetId(), AgentId: "agent-1", AttemptId: attempt}); err != nil {
		t.Fatal(err)
	}

	// Preemption: the agent is told to stop; once its heartbeat no longer
	// lists the attempt, the task waits in its queue again (a new stay).
	e.decide("workload/"+task.GetId(), &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadPreemptionRequested{
		WorkloadPreemptionRequested: &quotav1.WorkloadPreemptionRequested{TaskId: task.GetId(), PreemptorTaskId: "other",
			Reason: "reclaim", TaskVersion: 1}}})
	eventually(t, 10*time.Second, "preemption", func() bool { return e.get(task.GetId()).GetStatus() == "preempted" })
	hb, err := e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", MachineId: "m-1",
		AttemptIds: []string{attempt}})
	if err != nil || len(hb.GetStop()) != 1 || hb.GetStop()[0].GetReason() != "preempted" {
		t.Fatalf("heartbeat while running = %v, %v; want a stop", hb, err)
	}
	if s := e.get(task.GetId()).GetStatus(); s != "preempted" {
		t.Fatalf("status while the attempt still runs = %s", s)
	}
	if _, err := e.leases().SendHeartbeat(agent("agent-1"), &taskv1.SendHeartbeatRequest{AgentId: "agent-1", MachineId: "m-1"}); err != nil {
		t.Fatal(err)
	}
	after := e.get(task.GetId())
	if after.GetStatus() != "pending" || after.GetAdmitted() || after.GetAttemptId() != "" {
		t.Fatalf("after the stop = %v, want pending and waiting for admission", after)
	}
	if got := e.claim("agent-1", "m-1", 10); len(got) != 0 {
		t.Errorf("claim while waiting again = %v", got)
	}
}

func TestSubmissionRefusedByTheQuotaServiceStoresNothing(t *testing.T) {
	e := newAdmissionEnv(t)
	notExists, _ := status.New(codes.NotFound, "GU_QUOTA_NOT_EXISTS: tenant acme has no GU quota gu-1").
		WithDetails(&errdetails.ErrorInfo{Domain: "taskmesh", Reason: "GU_QUOTA_NOT_EXISTS"})
	for _, tt := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"GU quota missing", notExists.Err(), codes.NotFound},
		{"quota service down", status.Error(codes.Unavailable, "connection refused"), codes.Unavailable},
	} {
		e.quota.mu.Lock()
		e.quota.err = tt.err
		e.quota.mu.Unlock()
		_, err := e.tasks().CreateTask(user("acme"), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "gpu", Command: "train",
			Quota: "gu-1", Resources: map[string]string{"nvidia.com/gpu": "1"}}})
		if status.Code(err) != tt.want {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.want)
		}
		if tt.want == codes.NotFound {
			st := status.Convert(err)
			if len(st.Details()) != 1 || st.Details()[0].(*errdetails.ErrorInfo).GetReason() != "GU_QUOTA_NOT_EXISTS" {
				t.Errorf("%s: details = %v, want the quota service's reason passed on", tt.name, st.Details())
			}
		}
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks`).Scan(&n); err != nil || n != 0 {
		t.Errorf("tasks stored = %d (%v), want none", n, err)
	}
}
