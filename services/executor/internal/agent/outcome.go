package agent

import (
	"context"
	"os"
	"path/filepath"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// finishFromRunDir records the outcome from status.json when the shim is
// gone; without one the process is lost.
func (a *Agent) finishFromRunDir(ctx context.Context, at *attempt, stop *stopRequest) {
	st, ok, err := shim.ReadStatus(at.task.RunDir)
	if err != nil || !ok {
		// The shim is gone without writing its status, so nobody else
		// removes the task's cgroup (and kills what is left in it).
		if spec, serr := shim.ReadSpec(at.task.RunDir); serr == nil && spec.Cgroup != nil {
			_ = cgroup.Remove(spec.Cgroup.Dirs)
		}
		// Reached after a restart of the agent and when the shim (or the
		// shim host serving the task) died: the message says what is
		// known, not which of the two happened.
		msg := "the task's process was lost: its shim ended without recording the exit"
		if err != nil {
			msg += ": " + err.Error()
		}
		a.finish(ctx, at, a.failedBeforeStart(msg))
		return
	}
	a.finish(ctx, at, a.processOutcome(at, st, stop))
}

// processOutcome turns the shim's status into the journal outcome.
func (a *Agent) processOutcome(at *attempt, st shim.Status, stop *stopRequest) journal.Outcome {
	t := at.task
	code := st.ExitCode
	o := journal.Outcome{ExitCode: &code, StartedAt: st.StartedAt, EndedAt: st.EndedAt, StopReason: st.Stop}
	switch {
	case st.StartError != "":
		o.Status, o.Error = journal.StatusFailed, "start: "+st.StartError
	case st.Stop != "":
		detail := ""
		if stop != nil && stop.reason == st.Stop {
			detail = stop.detail
		}
		var decided bool
		o.Status, o.Error, decided = a.stopOutcome(t, st.Stop, detail)
		o.Synced, o.Note = decided, decidedNote(decided, st.Stop)
	case st.OOMKilled:
		// Whatever the exit code says, the kernel killed the task for
		// exceeding its memory limit: say so.
		o.Status = journal.StatusFailed
		o.Error = "out of memory: the kernel's OOM killer stopped the task at its memory limit"
		if m := t.Resources["memory"]; m != "" {
			o.Error += " (resources.memory " + m + ")"
		}
	case code == 0:
		o.Status = journal.StatusCompleted
	default:
		o.Status = journal.StatusFailed
		if st.Signal != 0 {
			o.Error = "killed by " + st.SignalName
		}
	}
	out := collectOutput(t.RunDir, st)
	o.Stdout, o.Stderr = out.stdout, out.stderr
	o.StdoutTruncated, o.StderrTruncated = st.StdoutDropped, st.StderrDropped
	o.Upload = out.large
	if policy.NormalizeType(t.Type) == policy.TypeVideo {
		// A rendered video is the result object; a failed render says why
		// in one line.
		o.Upload = o.Status == journal.StatusCompleted
		if o.Status == journal.StatusFailed && o.Error == "" {
			o.Error = videoError(t.RunDir)
		}
	}
	return o
}

// finish records the outcome (once) and delivers it.
func (a *Agent) finish(ctx context.Context, at *attempt, o journal.Outcome) {
	t := at.task
	if t.Origin == journal.OriginLocal {
		o.Synced, o.Note = true, ""
	}
	if o.EndedAt.IsZero() {
		o.EndedAt = a.now()
	}
	if o.Synced {
		o.SyncedAt = a.now()
	}
	changed, err := a.journal.Finish(journalCtx, t.AttemptID, o)
	if err != nil {
		a.log.Error("journal", "attempt_id", t.AttemptID, "err", err)
		return
	}
	if !changed {
		return
	}
	a.retryLocal(t, o)
	a.forgetOwnerFence(t, o)
	a.freeSlot(at)
	a.awaitStarted(ctx, at)
	a.log.Info("task finished", "task_id", t.ID, "attempt_id", t.AttemptID,
		"status", o.Status, "exit_code", derefInt(o.ExitCode), "error", o.Error)
	if o.Synced {
		a.settled(at.task)
		return
	}
	a.deliverLive(ctx, t.AttemptID)
}

func derefInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// cleanup removes a finished attempt's run directory once nothing more
// needs it (the outcome is synced; large output was uploaded).
func (a *Agent) cleanup(runDir string) {
	if runDir == "" || filepath.Dir(runDir) != filepath.Join(a.cfg.DataDir, "runs") {
		return // never remove anything outside our run directories
	}
	if a.spareRuns.recycle(runDir) {
		return
	}
	_ = os.RemoveAll(runDir)
}
