package shim

import "time"

// Socket operations. Each request and each response is one JSON line.
const (
	// OpState answers at once with the current State.
	OpState = "state"
	// OpStop starts stopping the task (SIGTERM to the group, Grace, SIGKILL
	// to the group) and answers at once; the first stop wins, later ones
	// are acknowledged and ignored. The outcome arrives through OpWait or
	// status.json.
	OpStop = "stop"
	// OpWait answers once the task has ended and status.json is written;
	// the agent keeps this request open for the task's whole life, which is
	// also how the shim knows an agent is attached.
	OpWait = "wait"
	// OpFence renews the task's fence (Spec.Fence): it now passes Fence
	// after the request. It is an error for a task without a fence, and
	// once the fence has passed (the task is being stopped for it).
	OpFence = "fence"
)

// Request is a message from the agent.
type Request struct {
	Op     string `json:"op"`
	Reason string `json:"reason,omitempty"`
	// Grace is OpStop's time between SIGTERM and SIGKILL; 0 kills right
	// after SIGTERM. Absent (an agent that sends none) means the spec's.
	Grace *time.Duration `json:"grace,omitempty"`
	// Fence is OpFence's new fence, counted from the request: a length,
	// not a time, so that the agent's and the shim's clocks need not agree.
	Fence *time.Duration `json:"fence,omitempty"`
	// RunDir is the run directory a host is asked to serve (OpServe).
	RunDir string `json:"run_dir,omitempty"`
}

// Response is the shim's answer.
type Response struct {
	Error string `json:"error,omitempty"`
	State State  `json:"state"`
}

// Progress is the latest progress the task reported. Seq grows with every
// change, so the agent can tell a new report from an old one.
type Progress struct {
	Value   int    `json:"value"`
	Message string `json:"message,omitempty"`
	Seq     int64  `json:"seq"`
}

// State is the shim's view of the task.
type State struct {
	ShimPID  int      `json:"shim_pid"`
	PID      int      `json:"pid"`
	Running  bool     `json:"running"`
	Stopping string   `json:"stopping,omitempty"`
	Progress Progress `json:"progress"`
	// Exit is set once the task has ended.
	Exit *Status `json:"exit,omitempty"`
}

// ready is the line written to the readiness pipe, and a host's answer to
// OpServe.
type ready struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}
