package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/cmdline"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/localapi"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// Local tasks (docs/api/agent-local.md) run on this agent only and are never
// reported to the server. They wait in the journal as pending, highest
// priority first, and take process slots before the claim loop starts its
// next claim. A claim long-polling when a local task arrives is ended
// early and asked again with its request id and no wait, so the tasks the
// server may have leased to it meanwhile are not lost and the slots it
// held that nothing claimed go to the local task at once.

// Submit queues a local task. The policy applies as to server tasks; a
// refused or malformed spec is an InvalidArgument (30005) error and
// changes nothing.
func (a *Agent) Submit(ctx context.Context, spec *taskv1.TaskSpec) (journal.Task, error) {
	return a.SubmitWithFence(ctx, spec, localapi.Fence{})
}

// SubmitWithFence is Submit with the creator's fence: with fence.Length >
// 0 the task runs only while its creator renews it (owner_fence.go); a
// zero fence.Grace takes the agent's own fence grace.
func (a *Agent) SubmitWithFence(ctx context.Context, spec *taskv1.TaskSpec, fence localapi.Fence) (journal.Task, error) {
	if spec == nil {
		return journal.Task{}, rpcerr.New(rpcerr.InvalidArgument, "spec is required")
	}
	if err := validateSpec(spec); err != nil {
		return journal.Task{}, rpcerr.New(rpcerr.InvalidArgument, err.Error())
	}
	typ := policy.NormalizeType(spec.GetType())
	command, args := spec.GetCommand(), spec.GetArgs()
	// A command line without args runs as its words, as on the server
	// (docs/api/tasks.md, "A command line").
	if typ == policy.TypeShell || typ == policy.TypePython {
		var err error
		if command, args, err = cmdline.Resolve(command, args); err != nil {
			return journal.Task{}, rpcerr.New(rpcerr.InvalidArgument, "command: "+err.Error())
		}
	}
	if err := a.policy.Check(policy.Task{
		Type: typ, Command: command, Args: args, Env: spec.GetEnv(), Workdir: spec.GetWorkdir(),
	}); err != nil {
		return journal.Task{}, rpcerr.New(rpcerr.InvalidArgument, err.Error())
	}
	now := a.now()
	t := journal.Task{
		ID: cmp.Or(spec.GetId(), uuid.NewString()), AttemptID: uuid.NewString(), Name: spec.GetName(), Type: typ,
		Origin: journal.OriginLocal, Command: command, Args: args,
		Workdir: spec.GetWorkdir(), Env: spec.GetEnv(),
		Timeout: 3600, Priority: 5,
		Status: journal.StatusPending, AssignedAgentID: a.cfg.AgentID,
		ReceivedAt: now, Synced: true,
	}
	if spec.Timeout != nil {
		t.Timeout = int(spec.GetTimeout())
	}
	if spec.Priority != nil {
		t.Priority = int(spec.GetPriority())
	}
	// The default is filled here, as the server fills it at submission:
	// the journal then holds the grace the task gets, and 0 stays a grace
	// of 0 (docs/api/agent-local.md).
	t.GracePeriodSec = int(a.cfg.GracePeriod / time.Second)
	if spec.GracePeriodSec != nil {
		t.GracePeriodSec = int(spec.GetGracePeriodSec())
	}
	t.MaxRetries, t.RetryDelaySec = int(spec.GetMaxRetries()), int(spec.GetRetryDelay())
	if fence.Length > 0 {
		t.OwnerFence, t.OwnerFenceGrace = fence.Length, fence.Grace
		if fence.Grace == 0 {
			t.OwnerFenceGrace = a.cfg.fenceGrace
		}
	}
	// Inserted and read back under localAccept: the answer is the task as
	// accepted (pending), not whatever state the loop has moved it to since
	// (it may be awake already, for an earlier task or its start).
	a.localAccept.Lock()
	if spec.GetId() != "" {
		// The client's own id names the task, as a task file's id names
		// the server's: while a task of that id waits or runs, creating it
		// again answers that task; once it ended, the same id runs it
		// again, as a new attempt the id reads from then on.
		prev, err := a.journal.Latest(journalCtx, t.ID)
		switch {
		case errors.Is(err, journal.ErrNotFound):
		case err != nil:
			a.localAccept.Unlock()
			return journal.Task{}, rpcerr.New(rpcerr.Internal, err.Error())
		case prev.Origin != journal.OriginLocal:
			a.localAccept.Unlock()
			return journal.Task{}, rpcerr.New(rpcerr.InvalidArgument, fmt.Sprintf("id: %q is a server task's on this agent", t.ID))
		case !journal.Final(prev.Status):
			a.localAccept.Unlock()
			return prev, nil
		}
	}
	if t.OwnerFenced() {
		// Counted from the acceptance, before the task can start.
		a.setOwnerFence(t.ID, t.OwnerFence)
	}
	if _, err := a.journal.Insert(journalCtx, t); err != nil {
		a.localAccept.Unlock()
		return journal.Task{}, rpcerr.New(rpcerr.Internal, err.Error())
	}
	accepted, err := a.journal.Get(journalCtx, t.AttemptID)
	a.localAccept.Unlock()
	wake(a.localWake)
	return accepted, err
}

// MaxLocalIDChars is the longest id a client may give a local task, the
// task API's cap on every id.
const MaxLocalIDChars = 128

// validateSpec checks what the task API's validation would (task.proto).
func validateSpec(s *taskv1.TaskSpec) error {
	switch id := s.GetId(); {
	case utf8.RuneCountInString(id) > MaxLocalIDChars:
		return fmt.Errorf("id is longer than %d characters", MaxLocalIDChars)
	case id == "." || id == ".." || strings.Contains(id, "/"):
		return fmt.Errorf("id %q cannot name a task in a route: no \"/\", and not \".\" or \"..\"", id)
	}
	switch n := len([]rune(s.GetName())); {
	case n == 0:
		return errors.New("name is required")
	case n > policy.MaxNameChars:
		return fmt.Errorf("name is longer than %d characters", policy.MaxNameChars)
	}
	switch s.GetType() {
	case "", policy.TypeShell, policy.TypePython, policy.TypeScript, policy.TypeNoop:
	default:
		return fmt.Errorf("type %q is not one of shell, python, script, noop", s.GetType())
	}
	if s.Timeout != nil && (s.GetTimeout() < 1 || s.GetTimeout() > 604800) {
		return errors.New("timeout must be between 1 and 604800 seconds")
	}
	if s.Priority != nil && (s.GetPriority() < 1 || s.GetPriority() > 10) {
		return errors.New("priority must be between 1 and 10")
	}
	if s.GracePeriodSec != nil && (s.GetGracePeriodSec() < 0 || s.GetGracePeriodSec() > 3600) {
		return errors.New("grace_period_sec must be between 0 and 3600")
	}
	if s.MaxRetries != nil && (s.GetMaxRetries() < 0 || s.GetMaxRetries() > 100) {
		return errors.New("max_retries must be between 0 and 100")
	}
	if s.RetryDelay != nil && (s.GetRetryDelay() < 0 || s.GetRetryDelay() > 86400) {
		return errors.New("retry_delay must be between 0 and 86400 seconds")
	}
	return nil
}

// retryLocal queues the next attempt of a local task whose attempt t
// failed, when it has retries left: a new pending row of the same task,
// startable retry_delay after the failure (docs/api/agent-local.md). A
// cancelled attempt is not retried, nor is a server task (the server
// decides its retries). The row is in the journal before the local loop
// hears of it, so a restart in between keeps the retry.
func (a *Agent) retryLocal(t journal.Task, o journal.Outcome) {
	if t.Origin != journal.OriginLocal || o.Status != journal.StatusFailed || t.RetryCount >= t.MaxRetries {
		return
	}
	now := a.now()
	next := journal.Task{
		ID: t.ID, AttemptID: uuid.NewString(), Name: t.Name, Type: t.Type, Origin: journal.OriginLocal,
		Command: t.Command, Args: t.Args, Workdir: t.Workdir, Env: t.Env, Timeout: t.Timeout, Priority: t.Priority,
		GracePeriodSec: t.GracePeriodSec, Status: journal.StatusPending, AssignedAgentID: a.cfg.AgentID,
		ReceivedAt: now, Synced: true, Resources: t.Resources,
		MaxRetries: t.MaxRetries, RetryDelaySec: t.RetryDelaySec, RetryCount: t.RetryCount + 1,
		RetryAt:    now.Add(time.Duration(t.RetryDelaySec) * time.Second),
		OwnerFence: t.OwnerFence, OwnerFenceGrace: t.OwnerFenceGrace,
	}
	a.localAccept.Lock()
	_, err := a.journal.Insert(journalCtx, next)
	a.localAccept.Unlock()
	if err != nil {
		a.log.Error("journal: queueing the retry of a local task", "task_id", t.ID, "err", err)
		return
	}
	a.log.Info("local task retried", "task_id", t.ID, "retry_count", next.RetryCount, "retry_at", next.RetryAt)
	wake(a.localWake)
}

// Cancel stops a task of this agent: a pending local task is cancelled at
// once; a running one is stopped (SIGTERM, grace, SIGKILL), with grace
// when given and the task's own grace_period_sec otherwise. A server task
// stopped this way is reported to the server as cancelled on the agent.
// It waits briefly for the stop to finish and returns the task as it is
// then.
func (a *Agent) Cancel(ctx context.Context, id string, grace *time.Duration) (journal.Task, error) {
	t, err := a.journal.Latest(journalCtx, id)
	if errors.Is(err, journal.ErrNotFound) {
		return journal.Task{}, rpcerr.New(rpcerr.TaskNotFound, fmt.Sprintf("task %s not found", id))
	}
	if err != nil {
		return journal.Task{}, rpcerr.New(rpcerr.Internal, err.Error())
	}
	if journal.Final(t.Status) {
		return journal.Task{}, rpcerr.New(rpcerr.TaskImmutable, fmt.Sprintf("task %s is already %s", id, t.Status))
	}
	at := a.active(t.AttemptID)
	if at == nil {
		// Pending and not yet picked up: nothing runs.
		if t.Status == journal.StatusPending {
			now := a.now()
			o := journal.Outcome{
				Status: journal.StatusCancelled, Error: "cancelled through the agent-local API",
				EndedAt: now, StopReason: reasonLocalCancel, Synced: t.Origin == journal.OriginLocal,
			}
			_, _ = a.journal.Finish(journalCtx, t.AttemptID, o)
			a.forgetOwnerFence(t, o)
			return a.journal.Get(journalCtx, t.AttemptID)
		}
		return journal.Task{}, rpcerr.New(rpcerr.TaskImmutable, fmt.Sprintf("task %s is not running here", id))
	}
	at.requestStop(stopRequest{reason: reasonLocalCancel, grace: grace})
	select {
	case <-at.done:
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	return a.journal.Get(journalCtx, t.AttemptID)
}

// Status summarises the queue.
func (a *Agent) Status(ctx context.Context) (localapi.QueueStatus, error) {
	c, err := a.journal.Count(journalCtx)
	if err != nil {
		return localapi.QueueStatus{}, rpcerr.New(rpcerr.Internal, err.Error())
	}
	a.mu.Lock()
	reachable, last := a.reachable, a.lastHeartbeat
	a.mu.Unlock()
	return localapi.QueueStatus{
		AgentID: a.cfg.AgentID, MachineID: a.cfg.MachineID, Labels: a.cfg.Labels,
		Slots: a.cfg.Slots, Running: int(a.running.Load()),
		Pending: c.Pending + c.Assigned, Unsynced: c.Unsynced,
		ServerReachable: reachable, LastHeartbeat: last,
	}, nil
}

// localLoop runs pending local tasks, highest priority first; a retry
// waiting for its delay runs once the delay is over.
func (a *Agent) localLoop(ctx context.Context) {
	wake(a.localWake)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.localWake:
		case <-retry.C:
		}
		for ctx.Err() == nil {
			at, due := a.nextLocal()
			if at == nil {
				if !due.IsZero() {
					retry.Reset(max(due.Sub(a.now()), time.Millisecond))
				}
				break
			}
			if !a.takeLocalSlot(ctx, at) {
				a.forget(at)
				return
			}
			a.runInBackground(func() { a.execute(ctx, at) })
		}
	}
}

// nextLocal registers and returns the next pending local task that may
// start now, if any; else due is when the first retry waiting for its
// delay may start (zero when none waits).
func (a *Agent) nextLocal() (at *attempt, due time.Time) {
	a.localAccept.Lock()
	defer a.localAccept.Unlock()
	rows, err := a.journal.WithStatus(journalCtx, journal.StatusPending)
	if err != nil {
		a.log.Error("journal", "err", err)
		return nil, time.Time{}
	}
	now := a.now()
	for _, t := range rows {
		if t.Origin != journal.OriginLocal {
			continue
		}
		if t.RetryAt.After(now) {
			if due.IsZero() || t.RetryAt.Before(due) {
				due = t.RetryAt
			}
			continue
		}
		at := newAttempt(t)
		if a.register(at) {
			return at, time.Time{}
		}
	}
	return nil, due
}

// takeLocalSlot takes the slot the attempt needs; while it waits, the
// claim loop does not start new claims.
func (a *Agent) takeLocalSlot(ctx context.Context, at *attempt) bool {
	if at.task.Type == policy.TypeNoop {
		select {
		case a.noops <- struct{}{}:
			at.noop = true
			return true
		case <-ctx.Done():
			return false
		}
	}
	a.localWaiting.Add(1)
	defer a.localWaiting.Add(-1)
	select {
	case a.slots <- struct{}{}:
		return a.keepLocalSlot(ctx, at)
	default:
	}
	// Every slot is busy or held by a claim: a claim waiting for server
	// work gives its slots back now rather than when its wait ends.
	a.interruptClaim()
	select {
	case a.slots <- struct{}{}:
		return a.keepLocalSlot(ctx, at)
	case <-ctx.Done():
		return false
	}
}

// keepLocalSlot keeps the slot just taken for at, unless the agent is
// stopping: then a slot may have come free only because the attempts'
// goroutines end and give theirs back. Kept, it had the task journaled
// running for a process that never started, and the next run recovered
// more running tasks than slots, the waiting one among them.
func (a *Agent) keepLocalSlot(ctx context.Context, at *attempt) bool {
	if ctx.Err() != nil {
		<-a.slots
		return false
	}
	at.slot = true
	return true
}
