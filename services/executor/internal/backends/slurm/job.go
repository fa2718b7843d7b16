package slurm

import (
	"strconv"
	"strings"
	"time"
)

// JobSpec is a job to submit, independent of the REST API version; each
// dialect writes it in its version's shape.
type JobSpec struct {
	// Name and Comment identify the job as this backend's and carry the
	// task and attempt (see jobName and jobComment).
	Name, Comment string
	Partition     string
	// WorkDir is the job's working directory on the node.
	WorkDir string
	// Env is the job's whole environment (Slurm does not add the
	// submitter's).
	Env map[string]string
	// Script is the batch script, starting with #!.
	Script string
	// CPUs per task; 0 leaves Slurm's default (1).
	CPUs int
	// MemoryMB per node; 0 leaves the partition's default.
	MemoryMB int64
	// GPUs per node ("gpu:N" GRES); 0 asks for none.
	GPUs int
	// TimeLimitMin is the job's time limit in minutes (at least 1).
	TimeLimitMin int
	// Nice lowers the job's priority (0 or more without operator rights).
	Nice int
	// Priority, when not 0, sets the job's priority outright (operators).
	Priority int
	// QoS names the job's quality of service ("" is the user's default).
	QoS string
	// StdoutPath and StderrPath are files on the node (batch output).
	StdoutPath, StderrPath string
}

// Job is a job as slurmctld reports it, independent of the version.
type Job struct {
	ID      int64
	Name    string
	Comment string
	// State is the base state (PENDING, RUNNING, COMPLETED, FAILED, …);
	// Completing is set while the job is still cleaning up.
	State      string
	Completing bool
	// Reason is Slurm's state_reason (why a job pends, or why it ended);
	// Description its details when Slurm gives any.
	Reason, Description string
	// Nodes is the allocated node list ("node-b").
	Nodes string
	// GRES lists the allocated GRES per node ("gpu:2(IDX:0-1)").
	GRES []string
	// ExitCode and Signal come from the job record once the job ended;
	// Signal is 0 unless the batch script was killed by a signal.
	ExitCode, Signal int
	// StartTime is when the job started (or is expected to), zero if unknown.
	StartTime time.Time
	// SubmitTime is when slurmctld accepted the job.
	SubmitTime time.Time
	StdoutPath string
	StderrPath string
	// BatchHost is the node that ran the batch script; empty when the job
	// never ran (its exit code is then not a process's).
	BatchHost string
	User      string
	QoS       string
	Priority  int64
}

// Slurm's base job states.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateSuspended   = "SUSPENDED"
	StateCompleted   = "COMPLETED"
	StateCancelled   = "CANCELLED"
	StateFailed      = "FAILED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
	StateOutOfMemory = "OUT_OF_MEMORY"
)

// baseStates are the states a job ends in or waits in; anything else Slurm
// says (COMPLETING, CONFIGURING, REQUEUED, RESIZING, …) is a flag or a
// passage between them.
var baseStates = map[string]bool{
	StatePending: true, StateRunning: true, StateSuspended: true, StateCompleted: true,
	StateCancelled: true, StateFailed: true, StateTimeout: true, StateNodeFail: true,
	StatePreempted: true, StateBootFail: true, StateDeadline: true, StateOutOfMemory: true,
}

// normalizeState reads Slurm's state words (v0.0.38: one string; v0.0.40
// and later: a list of the base state and its flags) into the base state
// and whether the job is still completing. A job Slurm reports only as
// COMPLETING or CONFIGURING has no base state yet: it is "" (and
// completing) or PENDING (configuring: nodes are being readied).
func normalizeState(words []string) (state string, completing bool) {
	for _, w := range words {
		w = strings.ToUpper(strings.TrimSpace(w))
		switch {
		case baseStates[w] && state == "":
			state = w
		case w == "COMPLETING" || w == "STAGE_OUT":
			completing = true
		case w == "CONFIGURING" && state == "":
			state = StatePending
		case (w == "REQUEUED" || w == "REQUEUE_HOLD" || w == "REQUEUE_FED") && state == "":
			state = StatePending
		}
	}
	return state, completing
}

// Final reports whether the job has ended for good (and finished
// cleaning up, so its exit code is in the record).
func (j Job) Final() bool {
	switch j.State {
	case "", StatePending, StateRunning, StateSuspended:
		return false
	}
	return !j.Completing
}

// GPUIndexes returns the GPU indexes Slurm allocated on the job's first
// node, as CUDA_VISIBLE_DEVICES spells them ("0,1"), or "" when none.
// gres_detail reads "gpu:2(IDX:0-1)" or "gpu:a100:2(IDX:0,2)".
func (j Job) GPUIndexes() string {
	for _, g := range j.GRES {
		if !strings.HasPrefix(g, "gpu") {
			continue
		}
		_, idx, ok := strings.Cut(g, "(IDX:")
		if !ok {
			continue
		}
		idx = strings.TrimSuffix(idx, ")")
		return expandRanges(idx)
	}
	return ""
}

// expandRanges turns "0-2,5" into "0,1,2,5"; what it cannot read it
// returns as given.
func expandRanges(s string) string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			out = append(out, part)
			continue
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || b < a || b-a > 1024 {
			return s
		}
		for i := a; i <= b; i++ {
			out = append(out, strconv.Itoa(i))
		}
	}
	return strings.Join(out, ",")
}

// FirstNode is the first node of the job's node list ("node-[1-3]" →
// "node-1"), the node a placement binds the task to.
func (j Job) FirstNode() string {
	nodes := strings.TrimSpace(j.Nodes)
	if nodes == "" || nodes == "(null)" {
		return ""
	}
	prefix, rest, bracket := strings.Cut(nodes, "[")
	if !bracket {
		first, _, _ := strings.Cut(nodes, ",")
		return first
	}
	if i := strings.Index(prefix, ","); i >= 0 {
		return prefix[:i] // "a,b[1-2]": a comes first
	}
	first := rest
	if i := strings.IndexAny(first, ",-]"); i >= 0 {
		first = first[:i]
	}
	return prefix + first
}
