package slurm

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// outcome is what CompleteTask reports for an attempt.
type outcome struct {
	exitCode int
	// err explains a failure the process could not report itself, or why
	// the attempt was preempted.
	err string
	// preemptedBy: Slurm took the job away; the attempt ends preempted
	// and the server requeues the task without using a retry.
	preemptedBy string
	// cancelled: someone on the node cancelled the task through its
	// agent's local API; the attempt ends cancelled, and so does the task,
	// with no retry (docs/api/agent-local.md), as on a process agent.
	cancelled bool
}

// Failed reports whether the outcome is a failure on the lease API.
func (o outcome) Failed() bool {
	return o.preemptedBy == "" && !o.cancelled && (o.exitCode != 0 || o.err != "")
}

// preemptedBySlurm is CompleteTask's preempted_by for jobs Slurm took away.
const preemptedBySlurm = "slurm"

// batchOutcome maps a batch job's final state onto the lease API
// (docs/slurm.md#states):
//
//	COMPLETED                              → completed (exit 0)
//	FAILED                                 → failed with the script's exit code (or signal)
//	TIMEOUT, OUT_OF_MEMORY, NODE_FAIL,
//	BOOT_FAIL, DEADLINE                    → failed, the error names the state and Slurm's reason
//	CANCELLED (not by Taskmesh), PREEMPTED → preempted by slurm: the server requeues the task, no retry used
func batchOutcome(j Job) outcome {
	switch j.State {
	case StateCompleted:
		if j.ExitCode == 0 && j.Signal == 0 {
			return outcome{}
		}
		return processOutcome(j)
	case StateFailed:
		if j.BatchHost == "" {
			// Never ran (refused, or failed to launch): the record's exit
			// code is not a process's.
			return outcome{exitCode: -1, err: stateError(j)}
		}
		o := processOutcome(j)
		if !o.Failed() {
			// Failed before the script ran (launch failure, bad output
			// path): no exit code of its own.
			o = outcome{exitCode: -1, err: stateError(j)}
		}
		return o
	case StateCancelled, StatePreempted:
		return preemptedOutcome(j)
	}
	return outcome{exitCode: -1, err: stateError(j)}
}

// placementOutcome is the outcome when the placeholder ended before the
// task did: whatever Slurm's reason, the allocation is gone.
func placementOutcome(j Job) outcome {
	switch j.State {
	case StateCancelled, StatePreempted:
		return preemptedOutcome(j)
	}
	return outcome{exitCode: -1, err: "slurm: the placeholder job ended: " + stateError(j)}
}

// preemptedOutcome: Slurm (or an operator) took the job away rather than
// it failing on its own. The backend's own cancels never get here: it
// stops following a job before it cancels it.
func preemptedOutcome(j Job) outcome {
	return outcome{exitCode: -1, err: preemptedError(j), preemptedBy: preemptedBySlurm}
}

// processOutcome is a script's own end: its exit code, or the signal
// that killed it.
func processOutcome(j Job) outcome {
	if j.Signal != 0 {
		// Named as the other backends name it (killed by SIGKILL).
		return outcome{exitCode: -1, err: "killed by " + shim.SignalName(syscall.Signal(j.Signal))}
	}
	return outcome{exitCode: j.ExitCode}
}

// stateError is Slurm's final state in words: "slurm: job 12 TIMEOUT
// (TimeLimit)".
func stateError(j Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "slurm: job %d %s", j.ID, j.State)
	if r := reasonText(j); r != "" {
		fmt.Fprintf(&b, " (%s)", r)
	}
	if j.State == StateNodeFail && j.Nodes != "" {
		fmt.Fprintf(&b, " on %s", j.Nodes)
	}
	return b.String()
}

// preemptedError says the job was taken away by Slurm (or an operator)
// rather than failing on its own; the task runs again.
func preemptedError(j Job) string {
	return stateError(j) + ": preempted in Slurm; the task is requeued"
}

// reasonText is Slurm's reason with its description, as squeue shows
// it ("ReqNodeNotAvail, UnavailableNodes:node-c"); "" for "None".
func reasonText(j Job) string {
	r, d := j.Reason, j.Description
	if r == "None" {
		r = ""
	}
	switch {
	case d == "":
		return r
	case r == "" || strings.HasPrefix(d, r):
		return d
	}
	return r + ": " + d
}

// pendingMessage is the progress message of a waiting job, which `ctl
// tasks why` shows: "slurm: job 12 PENDING (Resources)".
func pendingMessage(j Job) string {
	msg := fmt.Sprintf("%sjob %d PENDING", slurmMessagePrefix, j.ID)
	if r := reasonText(j); r != "" {
		msg += " (" + r + ")"
	}
	return msg
}

// slurmMessagePrefix starts every progress message the backend writes.
const slurmMessagePrefix = "slurm: "

// runningMessage says where Slurm runs the job.
func runningMessage(j Job) string {
	return fmt.Sprintf("%sjob %d RUNNING on %s", slurmMessagePrefix, j.ID, j.Nodes)
}
