// Package leasetest is a hand-written, in-process fake of the Taskmesh
// LeaseService for the agent's tests: a real gRPC server on 127.0.0.1 that
// hands out queued tasks (with long-poll claims and request_id
// idempotency), checks attempts like the real server, records every call,
// and can be told to fail.
package leasetest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Call is one recorded call.
type Call struct {
	Method        string
	Req           proto.Message
	Authorization string
	At            time.Time
}

type task struct {
	t        *taskv1.Task
	status   string // pending, assigned, running, or final
	attempt  string
	expires  time.Time
	complete *taskv1.CompleteTaskRequest
}

// Fake is the fake LeaseService.
type Fake struct {
	taskv1.UnimplementedLeaseServiceServer

	addr string
	srv  *grpc.Server

	mu       sync.Mutex
	tasks    map[string]*task
	queue    []string // pending task ids, in order
	claims   map[string][]*taskv1.Task
	calls    []Call
	stops    []*taskv1.StopAttempt
	changed  chan struct{} // closed and replaced on every change
	leaseTTL time.Duration
	parked   int // claims waiting for work now

	fail      func(method string, req proto.Message) error
	loseClaim func(req *taskv1.ClaimTasksRequest) bool
	uploadURL string
}

// SetFail installs a hook: when it returns an error for a call, the call
// fails with it before anything happens. nil removes it.
func (f *Fake) SetFail(fn func(method string, req proto.Message) error) {
	f.mu.Lock()
	f.fail = fn
	f.mu.Unlock()
}

// SetLoseClaimAnswer installs a hook: when it returns true for a claim, the
// claim leases its tasks and then fails with Unavailable, as a lost answer
// would.
func (f *Fake) SetLoseClaimAnswer(fn func(req *taskv1.ClaimTasksRequest) bool) {
	f.mu.Lock()
	f.loseClaim = fn
	f.mu.Unlock()
}

// SetUploadURL sets the base URL CreateResultUpload hands out.
func (f *Fake) SetUploadURL(u string) {
	f.mu.Lock()
	f.uploadURL = u
	f.mu.Unlock()
}

// Start starts a fake on 127.0.0.1; it stops with the test.
func Start(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		tasks: map[string]*task{}, claims: map[string][]*taskv1.Task{},
		changed: make(chan struct{}), leaseTTL: 300 * time.Second,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(f.Stop)
	return f
}

func (f *Fake) serve(ln net.Listener) {
	srv := grpc.NewServer()
	taskv1.RegisterLeaseServiceServer(srv, f)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Addr is the server's address.
func (f *Fake) Addr() string { return f.addr }

// Stop takes the server off the network (the agent sees it unreachable);
// its state stays for Restart.
func (f *Fake) Stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Restart serves again on the same address.
func (f *Fake) Restart(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart fake on %s: %v", f.addr, err)
	}
	f.serve(ln)
}

// SetLeaseTTL sets the lease handed out by claims and renewals.
func (f *Fake) SetLeaseTTL(d time.Duration) {
	f.mu.Lock()
	f.leaseTTL = d
	f.mu.Unlock()
}

// Add queues tasks; a task without id gets one. It returns the ids.
func (f *Fake) Add(ts ...*taskv1.Task) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, t := range ts {
		t = proto.Clone(t).(*taskv1.Task)
		if t.Id == "" {
			t.Id = uuid.NewString()
		}
		f.tasks[t.Id] = &task{t: t, status: "pending"}
		f.queue = append(f.queue, t.Id)
		ids = append(ids, t.Id)
	}
	f.changedLocked()
	return ids
}

// StopOnHeartbeat makes the next heartbeat ask the agent to stop the
// task's current attempt.
func (f *Fake) StopOnHeartbeat(taskID, reason string, graceSec int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tasks[taskID]
	f.stops = append(f.stops, &taskv1.StopAttempt{TaskId: taskID, AttemptId: t.attempt, Reason: reason, GracePeriodSec: graceSec})
	if reason == "cancelled" {
		t.status = "cancelled"
	}
}

// Attempt returns the task's current attempt id.
func (f *Fake) Attempt(taskID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tasks[taskID]; t != nil {
		return t.attempt
	}
	return ""
}

// Complete returns the accepted completion of a task, if any.
func (f *Fake) Complete(taskID string) *taskv1.CompleteTaskRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tasks[taskID]; t != nil {
		return t.complete
	}
	return nil
}

// Calls returns the recorded calls of a method ("" for all).
func (f *Fake) Calls(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// LastHeard is when the fake last received, before cut, a call that
// proves an agent alive to a scheduler (a heartbeat or a claim): the
// scheduler leases the agent's tasks elsewhere its dead-agent timeout
// after that.
func (f *Fake) LastHeard(cut time.Time) time.Time {
	var last time.Time
	for _, m := range []string{"SendHeartbeat", "ClaimTasks"} {
		for _, c := range f.Calls(m) {
			if c.At.Before(cut) && c.At.After(last) {
				last = c.At
			}
		}
	}
	return last
}

// WaitFor polls cond until it holds or the limit passes.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitComplete waits for the task's completion.
func (f *Fake) WaitComplete(t testing.TB, taskID string, limit time.Duration) *taskv1.CompleteTaskRequest {
	t.Helper()
	WaitFor(t, limit, "completion of "+taskID, func() bool { return f.Complete(taskID) != nil })
	return f.Complete(taskID)
}

func (f *Fake) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) record(ctx context.Context, method string, req proto.Message) error {
	md, _ := metadata.FromIncomingContext(ctx)
	auth := ""
	if v := md.Get("authorization"); len(v) > 0 {
		auth = v[0]
	}
	f.mu.Lock()
	f.calls = append(f.calls, Call{Method: method, Req: proto.Clone(req), Authorization: auth, At: time.Now()})
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		return fail(method, req)
	}
	return nil
}

// current checks that attempt is the task's current attempt.
func (f *Fake) currentLocked(taskID, attempt string) (*task, error) {
	t := f.tasks[taskID]
	switch {
	case t == nil:
		return nil, rpcerr.New(rpcerr.TaskNotFound, "task not found")
	case t.attempt != attempt:
		return nil, rpcerr.New(rpcerr.AttemptMismatch, "attempt mismatch")
	}
	return t, nil
}

func final(s string) bool {
	return s == "completed" || s == "failed" || s == "cancelled"
}

// ClaimTasks leases pending tasks, long-polling up to wait.
func (f *Fake) ClaimTasks(ctx context.Context, req *taskv1.ClaimTasksRequest) (*taskv1.ClaimTasksResponse, error) {
	if err := f.record(ctx, "ClaimTasks", req); err != nil {
		return nil, err
	}
	key := req.GetAgentId() + "/" + req.GetRequestId()
	deadline := time.Now().Add(req.GetWait().AsDuration())
	for {
		f.mu.Lock()
		if prev, ok := f.claims[key]; ok {
			f.mu.Unlock()
			return &taskv1.ClaimTasksResponse{Tasks: prev, RequestId: req.GetRequestId()}, nil
		}
		if len(f.queue) > 0 || !time.Now().Before(deadline) {
			out := f.leaseLocked(req)
			f.claims[key] = out
			lose := f.loseClaim
			f.mu.Unlock()
			if lose != nil && lose(req) {
				return nil, status.Error(codes.Unavailable, "answer lost")
			}
			return &taskv1.ClaimTasksResponse{Tasks: out, RequestId: req.GetRequestId()}, nil
		}
		ch := f.changed
		f.parked++
		f.mu.Unlock()
		var done bool
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			done = true
		}
		f.mu.Lock()
		f.parked--
		f.mu.Unlock()
		if done {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// Parked is the number of claims waiting for work now: a task added while
// one is parked can reach the agent only by waking it.
func (f *Fake) Parked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked
}

func (f *Fake) leaseLocked(req *taskv1.ClaimTasksRequest) []*taskv1.Task {
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 1
	}
	var out []*taskv1.Task
	now := time.Now()
	for len(out) < limit && len(f.queue) > 0 {
		id := f.queue[0]
		f.queue = f.queue[1:]
		t := f.tasks[id]
		t.status, t.attempt, t.expires = "assigned", uuid.NewString(), now.Add(f.leaseTTL)
		c := proto.Clone(t.t).(*taskv1.Task)
		c.Status, c.AttemptId, c.AssignedAgentId = "assigned", t.attempt, req.GetAgentId()
		c.AssignedAt, c.LeaseExpiresAt = timestamppb.New(now), timestamppb.New(t.expires)
		if c.LeaseTtlSec == 0 {
			c.LeaseTtlSec = int32(f.leaseTTL / time.Second) // as the server fills it in
		}
		out = append(out, c)
	}
	return out
}

// StartTask marks the task running.
func (f *Fake) StartTask(ctx context.Context, req *taskv1.StartTaskRequest) (*taskv1.StartTaskResponse, error) {
	if err := f.record(ctx, "StartTask", req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.currentLocked(req.GetTaskId(), req.GetAttemptId())
	if err != nil {
		return nil, err
	}
	if final(t.status) {
		return nil, rpcerr.New(rpcerr.TaskImmutable, "task is "+t.status)
	}
	t.status = "running"
	return &taskv1.StartTaskResponse{TaskId: req.GetTaskId(), Status: "running", AttemptId: t.attempt,
		StartedAt: timestamppb.Now(), LeaseExpiresAt: timestamppb.New(t.expires)}, nil
}

// RenewTaskLease extends the lease.
func (f *Fake) RenewTaskLease(ctx context.Context, req *taskv1.RenewTaskLeaseRequest) (*taskv1.RenewTaskLeaseResponse, error) {
	if err := f.record(ctx, "RenewTaskLease", req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.currentLocked(req.GetTaskId(), req.GetAttemptId())
	if err != nil {
		return nil, err
	}
	if final(t.status) {
		return nil, rpcerr.New(rpcerr.TaskImmutable, "task is "+t.status)
	}
	if time.Now().After(t.expires) {
		return nil, rpcerr.New(rpcerr.LeaseExpired, "lease expired")
	}
	t.expires = time.Now().Add(f.leaseTTL)
	return &taskv1.RenewTaskLeaseResponse{TaskId: req.GetTaskId(), Status: t.status, AttemptId: t.attempt,
		LeaseExpiresAt: timestamppb.New(t.expires)}, nil
}

// ReportTaskProgress records progress.
func (f *Fake) ReportTaskProgress(ctx context.Context, req *taskv1.ReportTaskProgressRequest) (*taskv1.ReportTaskProgressResponse, error) {
	if err := f.record(ctx, "ReportTaskProgress", req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.currentLocked(req.GetTaskId(), req.GetAttemptId())
	if err != nil {
		return nil, err
	}
	if final(t.status) {
		return nil, rpcerr.New(rpcerr.TaskImmutable, "task is "+t.status)
	}
	t.t.Progress, t.t.ProgressMessage = req.GetProgress(), req.GetMessage()
	return &taskv1.ReportTaskProgressResponse{TaskId: req.GetTaskId(), Status: t.status, AttemptId: t.attempt,
		Progress: req.GetProgress(), LastHeartbeatAt: timestamppb.Now()}, nil
}

// CompleteTask records the outcome; repeating it for the same attempt
// succeeds.
func (f *Fake) CompleteTask(ctx context.Context, req *taskv1.CompleteTaskRequest) (*taskv1.CompleteTaskResponse, error) {
	if err := f.record(ctx, "CompleteTask", req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.currentLocked(req.GetTaskId(), req.GetAttemptId())
	if err != nil {
		return nil, err
	}
	if t.complete != nil {
		return &taskv1.CompleteTaskResponse{TaskId: req.GetTaskId(), Status: t.status, AttemptId: t.attempt}, nil
	}
	if final(t.status) {
		return nil, rpcerr.New(rpcerr.TaskImmutable, "task is "+t.status)
	}
	if len(req.GetStdout()) > 65536 || len(req.GetStderr()) > 65536 {
		return nil, rpcerr.New(rpcerr.InvalidArgument, "inline output over 64 KiB")
	}
	t.status = "failed"
	switch {
	case req.GetCancelled():
		t.status = "cancelled"
	case req.GetExitCode() == 0 && req.GetError() == "":
		t.status = "completed"
	}
	t.complete = proto.Clone(req).(*taskv1.CompleteTaskRequest)
	f.changedLocked()
	return &taskv1.CompleteTaskResponse{TaskId: req.GetTaskId(), Status: t.status, AttemptId: t.attempt,
		EndedAt: req.GetEndedAt()}, nil
}

// CreateResultUpload hands out UploadURL/<key>.
func (f *Fake) CreateResultUpload(ctx context.Context, req *taskv1.CreateResultUploadRequest) (*taskv1.CreateResultUploadResponse, error) {
	if err := f.record(ctx, "CreateResultUpload", req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.currentLocked(req.GetTaskId(), req.GetAttemptId()); err != nil {
		return nil, err
	}
	key := fmt.Sprintf("results/%s/%s.json", req.GetTaskId(), req.GetAttemptId())
	return &taskv1.CreateResultUploadResponse{
		UploadUrl: f.uploadURL + "/" + key,
		Headers:   map[string]string{"X-Upload-Sha256": req.GetSha256()},
		ObjectKey: key,
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
	}, nil
}

// SendHeartbeat records the heartbeat and hands out pending stops.
func (f *Fake) SendHeartbeat(ctx context.Context, req *taskv1.SendHeartbeatRequest) (*taskv1.SendHeartbeatResponse, error) {
	if err := f.record(ctx, "SendHeartbeat", req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	stops := f.stops
	f.stops = nil
	return &taskv1.SendHeartbeatResponse{Stop: stops}, nil
}

// ExpireLease makes the task's lease expired, so renewals get 30003.
func (f *Fake) ExpireLease(taskID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tasks[taskID]; t != nil {
		t.expires = time.Now().Add(-time.Second)
	}
}
