// Package holder is what the backends that run claimed tasks on another
// engine (a Kubernetes cluster, Slurm) share with each other: the lease
// side of an agent. A Holder keeps the attempts a backend holds within its
// slots, claims tasks whenever a slot is free, sends the heartbeat that
// carries the server's stops to their attempts, and makes the attempt's
// calls on the lease API (start, renew, progress, outcome).
//
// What an attempt is on the engine (a PyTorchJob, a Slurm job, the task on
// a node's agent), how it is followed and adopted after a restart stay the
// backend's. See docs/executor.md for the lease protocol the calls follow.
package holder

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// Config is the backend's identity and pace on the lease API. The backend
// fills every field (its own defaults); a Holder adds none.
type Config struct {
	// AgentID is the backend's identity on the lease API (its agent token
	// is bound to it); MachineID and Labels are what its claims and
	// heartbeats say of it.
	AgentID, MachineID string
	Labels             []string
	// Slots bounds the attempts held at once.
	Slots int
	// Types are the task types claimed.
	Types []string
	// MaxClaim bounds one claim's limit (0: the free slots).
	MaxClaim int
	// ClaimWait is a claim's long-poll wait; RPCTimeout bounds every
	// other call.
	ClaimWait, RPCTimeout time.Duration
	// RenewInterval is the lease renewal interval (sooner when a third
	// of the lease is left: RenewDelay).
	RenewInterval time.Duration
	// HeartbeatInterval of SendHeartbeat, which carries cancel and
	// preempt.
	HeartbeatInterval time.Duration
	// Fence, when set, is how long the attempts held may run on after the
	// last heartbeat or claim the server answered was sent
	// (fence.Times); once it passes, each is sent the stop Fenced.
	Fence time.Duration
}

// Fenced is the stop reason of an attempt whose fence passed: the server
// has not answered for Fence and may lease the task elsewhere. Unlike the
// server's stops it is the backend's own, to report (fence.Message).
const Fenced = "fenced"

// Attempt names one attempt on the lease API.
type Attempt struct {
	TaskID, AttemptID string
}

// Holder holds a backend's attempts, each an R (the backend's own record
// of it) by attempt id.
type Holder[R any] struct {
	cfg   Config
	lease taskv1.LeaseServiceClient
	log   *slog.Logger
	// stopOf is where the server's stop reason for r goes: a channel
	// with room for one, which the attempt's follower reads.
	stopOf func(r R) chan<- string

	mu   sync.Mutex
	held map[string]R
	// contact is when the last call the server answered (a heartbeat or a
	// claim) was sent, by the monotonic clock; it starts as the holder's
	// creation (see fenceLoop).
	contact time.Time
	// answered: the server has answered a call of this process (contact
	// is then a send time, not the holder's creation).
	answered bool
	// freed wakes the claim loop when an attempt is released.
	freed chan struct{}
	wg    sync.WaitGroup
}

// New returns a holder that leases through lease. stopOf gives the channel
// an attempt's stop reason is sent to (without blocking: a stop already
// waiting there is enough).
func New[R any](cfg Config, lease taskv1.LeaseServiceClient, log *slog.Logger, stopOf func(r R) chan<- string) *Holder[R] {
	return &Holder[R]{cfg: cfg, lease: lease, log: log, stopOf: stopOf, held: map[string]R{}, freed: make(chan struct{}, 1), contact: time.Now()}
}

// CheckFence refuses a heartbeat interval under which a fence could pass
// between two heartbeats of a server that answers them all.
func (c Config) CheckFence() error {
	if c.Fence > 0 && c.HeartbeatInterval > c.Fence/2 {
		return fmt.Errorf("heartbeat interval %s is too long for the fence of %s: at most %s (the server's dead-agent timeout bounds the fence)", c.HeartbeatInterval, c.Fence, c.Fence/2)
	}
	return nil
}

// heard records that the server answered a call sent at sent.
func (h *Holder[R]) heard(sent time.Time) {
	h.mu.Lock()
	if sent.After(h.contact) {
		h.contact = sent
	}
	h.answered = true
	h.mu.Unlock()
}

// fenceLoop sends Fenced to every attempt held once Fence has passed
// since contact, until ctx ends, and again every 100 ms while it stays
// passed: an attempt held meanwhile (a claim sent long before, answered
// now) is stopped too. A claim or heartbeat the server answers renews
// contact.
//
// contact starts as the holder's creation, not as unknown: a restarted
// backend that adopts its jobs and cannot reach the server stops them a
// fence after its start. The server heard from the backend's earlier run
// no later than that, so this is still before it may lease them again.
func (h *Holder[R]) fenceLoop(ctx context.Context) {
	var fenced time.Time // the contact whose fence was last logged
	for {
		h.mu.Lock()
		contact := h.contact
		h.mu.Unlock()
		wait := time.Until(contact.Add(h.cfg.Fence))
		if wait <= 0 {
			h.fence(!contact.Equal(fenced))
			fenced, wait = contact, 100*time.Millisecond
		}
		if !Sleep(ctx, wait) {
			return
		}
	}
}

// fence sends Fenced to every attempt held; log says the fence has just
// passed.
func (h *Holder[R]) fence(log bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if log && len(h.held) > 0 {
		h.log.Warn("fence passed: the server has not answered for the fence; stopping the attempts held", "fence", h.cfg.Fence, "attempts", len(h.held))
	}
	for _, r := range h.held {
		select {
		case h.stopOf(r) <- Fenced:
		default: // a stop is on its way already
		}
	}
}

// Fence is the holder's fence (Config.Fence).
func (h *Holder[R]) Fence() time.Duration { return h.cfg.Fence }

// FenceLeft is how long from now the attempts held may run unless the
// server answers again: what is left of the fence since contact, 0 or
// less once it passed (fenceLoop is stopping them then). A backend that
// hands its attempts to processes of their own (a Slurm node's agent)
// passes it on, so that they stop by the same moment when the backend
// can no longer stop them itself.
//
// It is 0 until the server has answered this process: a restarted
// backend's contact is its start, which proves nothing about when the
// server last heard from it, and a fence passed on from it could outlast
// the one its earlier run passed on.
func (h *Holder[R]) FenceLeft() time.Duration {
	h.mu.Lock()
	contact, answered := h.contact, h.answered
	h.mu.Unlock()
	if h.cfg.Fence <= 0 || !answered {
		return 0
	}
	return time.Until(contact.Add(h.cfg.Fence))
}

// Client is the lease API client, for the calls a Holder does not make
// (result uploads).
func (h *Holder[R]) Client() taskv1.LeaseServiceClient { return h.lease }

// Go runs f on a goroutine that Wait waits for.
func (h *Holder[R]) Go(f func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
}

// Wait waits for every function Go started.
func (h *Holder[R]) Wait() { h.wg.Wait() }

// Hold records r as the holder of attemptID; false when the attempt is
// held already (a claim's redelivery, or adopted and claimed alike), in
// which case nothing changes.
func (h *Holder[R]) Hold(attemptID string, r R) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.held[attemptID]; ok {
		return false
	}
	h.held[attemptID] = r
	return true
}

// Get is the record holding attemptID.
func (h *Holder[R]) Get(attemptID string) (R, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.held[attemptID]
	return r, ok
}

// Release frees attemptID's slot and wakes the claim loop.
func (h *Holder[R]) Release(attemptID string) {
	h.mu.Lock()
	delete(h.held, attemptID)
	h.mu.Unlock()
	select {
	case h.freed <- struct{}{}:
	default:
	}
}

// Free is the number of free slots.
func (h *Holder[R]) Free() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.cfg.Slots-len(h.held), 0)
}

// RPCContext bounds one lease call.
func (h *Holder[R]) RPCContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, h.cfg.RPCTimeout)
}

// ClaimLoop leases tasks whenever a slot is free, until ctx ends, and
// passes each to accept, which holds it (Hold) and starts following it
// (Go), or leaves it. A failed claim is tried again a second later, with
// the same request id while the failure may be transient (the server then
// answers what it leased under that id, not a second lease), with a new
// one after a refusal.
func (h *Holder[R]) ClaimLoop(ctx context.Context, accept func(t *taskv1.Task)) {
	requestID := ""
	for ctx.Err() == nil {
		n := h.Free()
		if n == 0 {
			select {
			case <-h.freed:
			case <-ctx.Done():
			}
			continue
		}
		if h.cfg.MaxClaim > 0 {
			n = min(n, h.cfg.MaxClaim)
		}
		if requestID == "" {
			requestID = uuid.NewString()
		}
		cctx, cancel := context.WithTimeout(ctx, h.cfg.ClaimWait+h.cfg.RPCTimeout)
		sent := time.Now()
		resp, err := h.lease.ClaimTasks(cctx, &taskv1.ClaimTasksRequest{
			AgentId: h.cfg.AgentID, MachineId: h.cfg.MachineID, Labels: h.cfg.Labels,
			Limit: int32(n), RequestId: requestID, Wait: durationpb.New(h.cfg.ClaimWait), Types: h.cfg.Types,
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !rpcerr.Transient(err) {
				requestID = "" // a refused request is not retried as is
			}
			h.log.Warn("claim failed", "err", err)
			Sleep(ctx, time.Second)
			continue
		}
		requestID = ""
		h.heard(sent)
		for _, t := range resp.GetTasks() {
			if t.GetId() == "" || t.GetAttemptId() == "" {
				continue
			}
			accept(t)
		}
	}
}

// HeartbeatLoop sends the backend's heartbeat every HeartbeatInterval
// (a failed one again a second later) until ctx ends, and passes the
// server's stops (cancelled, preempted, lease_lost, …) to the attempts
// held. With a Fence it also stops them once the fence passes
// (fenceLoop).
func (h *Holder[R]) HeartbeatLoop(ctx context.Context) {
	if h.cfg.Fence > 0 {
		h.Go(func() { h.fenceLoop(ctx) })
	}
	for {
		h.mu.Lock()
		ids := make([]string, 0, len(h.held))
		for id := range h.held {
			ids = append(ids, id)
		}
		free := max(h.cfg.Slots-len(h.held), 0)
		h.mu.Unlock()
		cctx, cancel := h.RPCContext(ctx)
		sent := time.Now()
		resp, err := h.lease.SendHeartbeat(cctx, &taskv1.SendHeartbeatRequest{
			AgentId: h.cfg.AgentID, MachineId: h.cfg.MachineID, Labels: h.cfg.Labels,
			AttemptIds: ids, FreeSlots: int32(free),
		})
		cancel()
		next := h.cfg.HeartbeatInterval
		switch {
		case err == nil:
			h.heard(sent)
		case ctx.Err() == nil:
			h.log.Warn("heartbeat failed", "err", err)
			// Each answered heartbeat moves the fence: one lost to a blip
			// is not left to cost a whole interval of it.
			next = min(next, time.Second)
		}
		for _, s := range resp.GetStop() {
			r, ok := h.Get(s.GetAttemptId())
			if !ok {
				continue
			}
			reason := s.GetReason()
			if reason == "" {
				reason = "cancelled"
			}
			select {
			case h.stopOf(r) <- reason:
			default:
			}
		}
		if !Sleep(ctx, next) {
			return
		}
	}
}

// Start reports a running (StartTask is idempotent) and returns the
// lease's end as the server says it (zero when it says none).
func (h *Holder[R]) Start(ctx context.Context, a Attempt) (time.Time, error) {
	cctx, cancel := h.RPCContext(ctx)
	defer cancel()
	resp, err := h.lease.StartTask(cctx, &taskv1.StartTaskRequest{TaskId: a.TaskID, AgentId: h.cfg.AgentID, AttemptId: a.AttemptID})
	if err != nil {
		return time.Time{}, err
	}
	return leaseEnd(resp.GetLeaseExpiresAt()), nil
}

// Renew extends a's lease and returns its new end (zero when the server
// says none). rpcerr.AttemptGone(err): the attempt is no longer this
// backend's.
func (h *Holder[R]) Renew(ctx context.Context, a Attempt) (time.Time, error) {
	cctx, cancel := h.RPCContext(ctx)
	defer cancel()
	resp, err := h.lease.RenewTaskLease(cctx, &taskv1.RenewTaskLeaseRequest{TaskId: a.TaskID, AgentId: h.cfg.AgentID, AttemptId: a.AttemptID})
	if err != nil {
		return time.Time{}, err
	}
	return leaseEnd(resp.GetLeaseExpiresAt()), nil
}

// leaseEnd is the lease's end as an answer says it; zero when it says none.
func leaseEnd(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// RenewDelay is how long until a lease ending at expires (zero: unknown)
// is renewed: the renew interval, but no later than a third of what is
// left of it, and not sooner than 100 ms.
func (h *Holder[R]) RenewDelay(expires time.Time) time.Duration {
	d := h.cfg.RenewInterval
	if !expires.IsZero() {
		d = min(d, time.Until(expires)/3)
	}
	return max(d, 100*time.Millisecond)
}

// Progress reports a's progress; the message is cut to the API's 4,096
// bytes.
func (h *Holder[R]) Progress(ctx context.Context, a Attempt, progress int, msg string) error {
	cctx, cancel := h.RPCContext(ctx)
	defer cancel()
	_, err := h.lease.ReportTaskProgress(cctx, &taskv1.ReportTaskProgressRequest{
		TaskId: a.TaskID, AgentId: h.cfg.AgentID, AttemptId: a.AttemptID, Progress: int32(progress), Message: textcut.Bytes(msg, 4096),
	})
	return err
}

// Complete reports an attempt's outcome (req, whose AgentId the holder
// sets), retrying with backoff while the server is unreachable. It
// reports whether the server answered for good: it took the outcome, or
// refused it (the attempt is no longer this backend's; logged on log).
// False only when ctx ended first.
func (h *Holder[R]) Complete(ctx context.Context, req *taskv1.CompleteTaskRequest, log *slog.Logger) bool {
	req.AgentId = h.cfg.AgentID
	delay := 200 * time.Millisecond
	for {
		cctx, cancel := h.RPCContext(ctx)
		_, err := h.lease.CompleteTask(cctx, req)
		cancel()
		if err == nil || !rpcerr.Transient(err) {
			if err != nil {
				log.Warn("outcome rejected", "err", err)
			}
			return true
		}
		if !Sleep(ctx, delay) {
			return false
		}
		delay = min(delay*2, 10*time.Second)
	}
}

// Sleep waits d; false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
