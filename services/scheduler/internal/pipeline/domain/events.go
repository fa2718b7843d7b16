package domain

import "time"

// Event is a fact about one job, named in the past tense.
type Event interface{ EventName() string }

// Record is an event with when and by whom it happened.
type Record struct {
	Event Event
	At    time.Time
	Actor string
	// IP is the address the actor's request came from, as the gateway saw
	// it; empty when no client caused the event.
	IP string
}

type (
	// Submitted: the job exists with its inputs in place; status ONNX.
	Submitted struct {
		ID, TenantID string
		Inputs       Inputs
		Keys         InputKeys
	}
	// StageQueued: the stage's task was created.
	StageQueued struct {
		Stage  Stage
		TaskID string
	}
	// Progressed: the current stage's task reported progress.
	Progressed struct {
		Stage    Stage
		Progress int
		Message  string
	}
	// StageSucceeded: the stage's task completed and its output is stored.
	StageSucceeded struct {
		Stage  Stage
		TaskID string
		Output string
	}
	// Failed: a stage failed; the job is FAILED.
	Failed struct {
		Step   Stage
		Reason string
		TaskID string
	}
)

func (Submitted) EventName() string      { return "JobSubmitted" }
func (StageQueued) EventName() string    { return "JobStageQueued" }
func (Progressed) EventName() string     { return "JobProgressed" }
func (StageSucceeded) EventName() string { return "JobStageSucceeded" }
func (Failed) EventName() string         { return "JobFailed" }

// Apply folds one recorded event into j: the one fold of job events (the
// jobs table, its rebuild from the event store, and every reader of the
// job topic move a job with it). Events are facts: it never fails.
func Apply(j Job, r Record) Job {
	j.Version++
	j.UpdatedAt = r.At
	switch e := r.Event.(type) {
	case Submitted:
		j = Job{ID: e.ID, TenantID: e.TenantID, CreatedBy: r.Actor, Status: StatusONNX, Stage: StageONNX,
			CreatedAt: r.At, UpdatedAt: r.At, Inputs: e.Inputs, InputKeys: e.Keys, Version: j.Version}
	case StageQueued:
		j.StageTasks = with(j.StageTasks, e.Stage, e.TaskID)
	case Progressed:
		j.Progress, j.Message = e.Progress, e.Message
	case StageSucceeded:
		j.StageTasks = with(j.StageTasks, e.Stage, e.TaskID)
		j.Outputs = with(j.Outputs, e.Stage, e.Output)
		j.Message = ""
		if next, ok := e.Stage.Next(); ok {
			j.Status, j.Stage, j.Progress = next.Status(), next, 0
		} else {
			j.Status, j.Progress = StatusCompleted, 100
		}
	case Failed:
		if e.TaskID != "" {
			j.StageTasks = with(j.StageTasks, e.Step, e.TaskID)
		}
		j.Status, j.Stage = StatusFailed, e.Step
		j.Error = &Failure{Step: e.Step, Reason: e.Reason}
	}
	return j
}

// with returns m with k set to v, without changing m (a fold must not
// share maps between the states it returns).
func with(m map[Stage]string, k Stage, v string) map[Stage]string {
	out := make(map[Stage]string, len(m)+1)
	for mk, mv := range m {
		out[mk] = mv
	}
	out[k] = v
	return out
}

// Fold replays records from the zero state.
func Fold(records []Record) Job {
	var j Job
	for _, r := range records {
		j = Apply(j, r)
	}
	return j
}
