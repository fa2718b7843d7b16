package agent

import (
	"context"
	"time"

	"github.com/google/uuid"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// claimLoop pulls work from the server: a long poll whenever a process
// slot is free, never a fixed sleep.
func (a *Agent) claimLoop(ctx context.Context) {
	bo := backoffDelay{base: 200 * time.Millisecond, limit: 10 * time.Second}
	requestID := ""
	for ctx.Err() == nil {
		held, ahead := a.takeSlots(ctx)
		n := held + ahead
		if n == 0 {
			return
		}
		if requestID == "" {
			requestID = uuid.NewString()
		}
		resp, err := a.claim(ctx, n, requestID, a.cfg.ClaimWait, true)
		if a.endClaim() && ctx.Err() == nil {
			// A local task wants a slot this long poll holds: ask again
			// with the same request id and no wait, which returns what
			// the interrupted claim leased, if anything, or leases what
			// is claimable now; the slots nobody uses go back.
			resp, err = a.claim(ctx, n, requestID, 0, false)
		}
		if err != nil {
			a.giveSlots(held)
			if ctx.Err() != nil {
				return
			}
			if status.Code(err) == codes.PermissionDenied {
				// Perhaps the agent's address changed: its heartbeat is what
				// moves the token, so send one now rather than in 5 s.
				wake(a.heartbeatWake)
			}
			if rpcerr.Transient(err) {
				// Keep the request id: if the server leased tasks and the
				// answer was lost, the retry returns the same tasks.
				a.log.Warn("claim failed, retrying", "err", err)
			} else {
				a.log.Error("claim refused", "err", err)
				requestID = ""
			}
			sleep(ctx, bo.next())
			continue
		}
		bo.reset()
		requestID = ""
		a.startClaimed(ctx, resp.GetTasks(), held)
	}
}

// claim asks the server for up to n tasks, long-polling up to wait; an
// interruptible claim can be ended early by interruptClaim.
func (a *Agent) claim(ctx context.Context, n int, requestID string, wait time.Duration, interruptible bool) (*taskv1.ClaimTasksResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, wait+a.cfg.RPCTimeout)
	defer cancel()
	if interruptible {
		a.mu.Lock()
		a.claimCancel, a.claimInterrupted = cancel, false
		a.mu.Unlock()
		if a.localWaiting.Load() > 0 {
			// A local task began waiting after takeSlots looked and before
			// this claim could be interrupted: its interruptClaim found
			// nothing to end, so end this one now.
			a.interruptClaim()
		}
	}
	sent := time.Now()
	resp, err := a.lease.ClaimTasks(cctx, &taskv1.ClaimTasksRequest{
		AgentId:   a.cfg.AgentID,
		MachineId: a.cfg.MachineID,
		Limit:     int32(n),
		RequestId: requestID,
		Labels:    a.cfg.Labels,
		Wait:      durationpb.New(wait),
		Types:     a.cfg.Types,
	})
	if err == nil {
		// The server records a claim as a sign of life when it arrives.
		a.heard(sent)
	}
	return resp, err
}

// endClaim marks the long poll over and reports whether interruptClaim
// ended it.
func (a *Agent) endClaim() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	interrupted := a.claimInterrupted
	a.claimCancel, a.claimInterrupted = nil, false
	return interrupted
}

// interruptClaim ends the claim long-polling now, if one is, so that the
// process slots it holds come back at once instead of when its wait ends.
func (a *Agent) interruptClaim() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.claimCancel != nil && !a.claimInterrupted {
		a.claimInterrupted = true
		a.claimCancel()
	}
}

// maxClaimLimit is the largest limit the server accepts.
const maxClaimLimit = 1000

// takeSlots blocks until a process slot is free or tasks may be claimed
// ahead, then takes every free slot (held) and says how many tasks to
// claim beyond them (ahead). Local tasks waiting for a slot go first.
func (a *Agent) takeSlots(ctx context.Context) (held, ahead int) {
	for a.localWaiting.Load() > 0 {
		if !sleep(ctx, 50*time.Millisecond) {
			return 0, 0
		}
	}
	for {
		// Tasks claimed ahead take free slots first; the claim takes
		// only what nobody waits for.
		var free chan struct{}
		if a.queued.Load() == 0 {
			free = a.slots
			held = a.takeFreeSlots(0)
		}
		if ahead = min(a.aheadRoom(), maxClaimLimit-held); held+ahead > 0 {
			return held, ahead
		}
		select {
		case free <- struct{}{}:
			if a.localWaiting.Load() > 0 {
				// A local task waits for a slot too, and goes first: the
				// slot goes back for it, whichever of the two the freed
				// slot happened to wake.
				a.giveSlots(1)
				for a.localWaiting.Load() > 0 {
					if !sleep(ctx, 50*time.Millisecond) {
						return 0, 0
					}
				}
				continue
			}
			held = a.takeFreeSlots(1)
			return held, min(a.aheadRoom(), maxClaimLimit-held)
		case <-a.aheadWake:
		case <-ctx.Done():
			return 0, 0
		}
	}
}

// takeFreeSlots takes free slots without waiting, up to the claim limit;
// held are taken already. It returns how many are held now.
func (a *Agent) takeFreeSlots(held int) int {
	for held < min(a.cfg.Slots, maxClaimLimit) {
		select {
		case a.slots <- struct{}{}:
			held++
		default:
			return held
		}
	}
	return held
}

// Claiming ahead (ClaimAhead > 0). When a slot frees, the next task should
// start at once, not after a claim's round trip and the server's commit.
// So while tasks are short, the agent claims up to ClaimAhead tasks beyond
// its free slots;
// they wait in order for the next free slot. A task claimed ahead is held
// from other agents while it waits, so the agent claims ahead only while
// the processes it ran recently took less than AheadBelow on average: a
// task then waits about that long, and as soon as tasks run longer the
// agent claims only for free slots again
// (docs/decisions/0077-claim-ahead-and-start-alongside.md).
const DefaultAheadBelow = 500 * time.Millisecond

// aheadRoom is how many tasks may be claimed beyond the free slots now.
func (a *Agent) aheadRoom() int {
	avg := time.Duration(a.runTime.Load())
	if a.cfg.ClaimAhead <= 0 || avg <= 0 || avg >= a.cfg.AheadBelow {
		return 0
	}
	return max(a.cfg.ClaimAhead-int(a.queued.Load()), 0)
}

// ranFor feeds a process's run time into the average aheadRoom reads
// (an exponential moving average over about the last Slots processes).
func (a *Agent) ranFor(d time.Duration) {
	d = max(d, time.Microsecond)
	for {
		old := a.runTime.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/int64(a.cfg.Slots+1)
		}
		if a.runTime.CompareAndSwap(old, next) {
			if (old <= 0 || time.Duration(old) >= a.cfg.AheadBelow) && time.Duration(next) < a.cfg.AheadBelow {
				wake(a.aheadWake)
			}
			return
		}
	}
}

func (a *Agent) giveSlots(n int) {
	for range n {
		<-a.slots
	}
}

// startClaimed journals the claimed tasks (before anything starts) and
// starts them. held is the number of slots the claim took.
func (a *Agent) startClaimed(ctx context.Context, tasks []*taskv1.Task, held int) {
	now := a.now()
	rows := make([]journal.Task, 0, len(tasks))
	keeps := make([]journal.AttemptFiles, 0, len(tasks))
	for _, t := range tasks {
		if t.GetId() == "" || t.GetAttemptId() == "" {
			a.log.Error("claimed task without id or attempt id", "task_id", t.GetId())
			continue
		}
		if to := t.GetAssignedAgentId(); to != "" && to != a.cfg.AgentID {
			// A server that answers a claim's retry with a task leased to
			// another agent since must not make it run twice.
			a.log.Error("claimed task is leased to another agent", "task_id", t.GetId(), "attempt_id", t.GetAttemptId(), "agent", to)
			continue
		}
		// Journaled before the attempt row: once the row exists, a
		// restarted agent may run it, and needs these.
		files := filesFromClaim(t)
		if err := a.journal.SetAttemptFiles(journalCtx, t.GetAttemptId(), files); err != nil {
			a.log.Error("journal claimed tasks", "err", err)
			continue
		}
		rows = append(rows, fromClaim(t, a.cfg.AgentID, now))
		keeps = append(keeps, files)
	}
	created, err := a.journal.Insert(journalCtx, rows...)
	if err != nil {
		// Without a journal entry the task must not run; its lease runs
		// out and the server gives it to someone else.
		a.log.Error("journal claimed tasks", "err", err)
		a.giveSlots(held)
		return
	}
	for i, row := range rows {
		at := newAttempt(row)
		if !created[i] || !a.register(at) {
			continue // already known: a replayed answer
		}
		a.rememberFiles(row.AttemptID, keeps[i])
		if policy.NormalizeType(row.Type) == policy.TypeNoop {
			// noop needs no process slot, only a noop slot.
			select {
			case a.noops <- struct{}{}:
			case <-ctx.Done():
				a.forget(at)
				continue
			}
			at.noop = true
			a.runInBackground(func() { a.execute(ctx, at) })
			continue
		}
		if held > 0 {
			held--
			at.slot = true
			a.runInBackground(func() { a.execute(ctx, at) })
			continue
		}
		// Claimed ahead (or the server returned more than asked): wait
		// for a slot, in claim order.
		a.queued.Add(1)
		a.runInBackground(func() {
			defer func() {
				a.queued.Add(-1)
				wake(a.aheadWake)
			}()
			select {
			case a.slots <- struct{}{}:
				at.slot = true
			case <-ctx.Done():
				a.forget(at)
				return
			}
			a.execute(ctx, at)
		})
	}
	a.giveSlots(held)
}

// forget drops an attempt that never started (shutdown); the journal keeps
// it as assigned and recovery picks it up.
func (a *Agent) forget(at *attempt) {
	a.mu.Lock()
	delete(a.runs, at.task.AttemptID)
	a.mu.Unlock()
	close(at.done)
}

func fromClaim(t *taskv1.Task, agentID string, now time.Time) journal.Task {
	row := journal.Task{
		ID: t.GetId(), Name: t.GetName(), Type: policy.NormalizeType(t.GetType()), Origin: journal.OriginServer,
		Command: t.GetCommand(), Args: t.GetArgs(), Workdir: t.GetWorkdir(), Env: t.GetEnv(),
		Timeout: int(t.GetTimeout()), Priority: int(t.GetPriority()),
		LeaseTTLSec: int(t.GetLeaseTtlSec()), RenewIntervalSec: int(t.GetRenewIntervalSec()),
		GracePeriodSec: int(t.GetGracePeriodSec()),
		// The server's retry settings, shown in the local queue as the
		// task has them; only the server retries a server task
		// (retryLocal leaves it alone).
		MaxRetries: int(t.GetMaxRetries()), RetryDelaySec: int(t.GetRetryDelay()), RetryCount: int(t.GetRetryCount()),
		Status: journal.StatusAssigned, AttemptID: t.GetAttemptId(), AssignedAgentID: agentID,
		ReceivedAt: now, AssignedAt: now, Resources: t.GetResources(),
	}
	if t.GetLeaseExpiresAt() != nil {
		row.LeaseExpiresAt = t.GetLeaseExpiresAt().AsTime()
	}
	if t.GetAssignedAt() != nil {
		row.AssignedAt = t.GetAssignedAt().AsTime()
	}
	if v := t.GetVideo(); v != nil {
		// Journaled with the task: a restarted agent still has them.
		if b, err := protojson.Marshal(v); err == nil {
			row.Video = string(b)
		}
	}
	return row
}
