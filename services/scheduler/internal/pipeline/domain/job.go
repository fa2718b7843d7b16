package domain

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Stage is one step of the fixed flow, spelled as error.step and the
// stage_tasks keys show it.
type Stage string

// The stages, in the order every job runs them.
const (
	StageONNX Stage = "onnx"
	StageBIE  Stage = "bie"
	StageNEF  Stage = "nef"
)

// Stages lists the stages in order: no job skips one or runs them in
// another order.
func Stages() []Stage { return []Stage{StageONNX, StageBIE, StageNEF} }

// ParseStage reads a stage name.
func ParseStage(s string) (Stage, bool) {
	switch Stage(s) {
	case StageONNX, StageBIE, StageNEF:
		return Stage(s), true
	}
	return "", false
}

// Next is the stage after s; ok is false after the last one.
func (s Stage) Next() (next Stage, ok bool) {
	switch s {
	case StageONNX:
		return StageBIE, true
	case StageBIE:
		return StageNEF, true
	}
	return "", false
}

// Status is the job's status while it is in the stage (ONNX, BIE, NEF).
func (s Stage) Status() Status { return Status(strings.ToUpper(string(s))) }

// Status is a job's status as GET /jobs/{job_id} shows it.
type Status string

// The statuses.
const (
	StatusONNX      Status = "ONNX"
	StatusBIE       Status = "BIE"
	StatusNEF       Status = "NEF"
	StatusCompleted Status = "COMPLETED"
	StatusFailed    Status = "FAILED"
)

// Final reports whether the job is done, one way or the other.
func (s Status) Final() bool { return s == StatusCompleted || s == StatusFailed }

// Inputs are the object keys of a job's inputs in its own layout.
type Inputs struct {
	Model     string   `json:"model"`
	Quant     string   `json:"quant"`
	RefImages []string `json:"ref_images,omitempty"`
}

// InputKeys are the upload keys a client named when it created the job.
type InputKeys struct {
	Model     string   `json:"model"`
	Quant     string   `json:"quant"`
	RefImages []string `json:"ref_images,omitempty"`
}

// Failure says which stage failed and why.
type Failure struct {
	Step   Stage  `json:"step"`
	Reason string `json:"reason"`
}

// Job is the aggregate's state: the record GET /jobs/{job_id} shows.
type Job struct {
	ID        string    `json:"job_id"`
	TenantID  string    `json:"tenant_id"`
	CreatedBy string    `json:"created_by,omitempty"`
	Status    Status    `json:"status"`
	Stage     Stage     `json:"stage"`
	Progress  int       `json:"progress"`
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Inputs    Inputs    `json:"inputs"`
	InputKeys InputKeys `json:"input_keys"`
	// StageTasks names the scheduler task of each stage queued so far.
	StageTasks map[Stage]string `json:"stage_tasks,omitempty"`
	// Outputs are the object keys of the stages that succeeded.
	Outputs map[Stage]string `json:"outputs,omitempty"`
	Error   *Failure         `json:"error,omitempty"`
	Version int64            `json:"version"`
}

// Output is the object key stage s produced, "" until it succeeded.
func (j Job) Output(s Stage) string { return j.Outputs[s] }

// Errors of the commands.
var (
	// ErrNotFound: no such job for this caller (another tenant's job too).
	ErrNotFound = errors.New("job not found")
	// ErrInvalid is wrapped by every *InvalidError.
	ErrInvalid = errors.New("invalid parameter")
)

// InvalidError names what is wrong with a request; errors.Is(err,
// ErrInvalid).
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// MaxReasonBytes bounds a failure's reason as it is recorded.
const MaxReasonBytes = 2048
