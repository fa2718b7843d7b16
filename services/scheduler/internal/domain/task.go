package domain

import (
	"slices"
	"strings"
	"time"
)

// Status is a task's lifecycle state, spelled as the task API shows it
// (the proto's Task.status carries these strings).
type Status string

const (
	StatusPending   Status = "pending"
	StatusAssigned  Status = "assigned"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	StatusPreempted Status = "preempted"
	StatusSuspended Status = "suspended"
)

// Statuses lists every status, in the order of the lifecycle: the one set
// of task states every service uses (through package lifecycle).
func Statuses() []Status {
	return []Status{StatusPending, StatusAssigned, StatusRunning, StatusCompleted, StatusFailed,
		StatusCancelled, StatusPreempted, StatusSuspended}
}

// Final reports whether no further transition happens on its own.
func (s Status) Final() bool {
	// Preempted and suspended are not final: Requeue brings them back to
	// pending.
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Leased reports whether an attempt holds the task.
func (s Status) Leased() bool { return s == StatusAssigned || s == StatusRunning }

// Ended reports whether every one of tasks has ended: final or deleted.
// A task file's name (the client's id of a create) may create new tasks
// then; while one of its tasks still waits or runs, creating again
// answers that task (docs/api/tasks.md#the-clients-id).
func Ended(tasks []Task) bool {
	for _, t := range tasks {
		if !t.Deleted && !t.Status.Final() {
			return false
		}
	}
	return true
}

// Task types.
const (
	TypeShell  = "shell"
	TypePython = "python"
	TypeScript = "script"
	// TypeNoop completes without spawning a process (benchmarks, probes).
	TypeNoop = "noop"
	// TypeVideo runs the executor's video runner on Spec.Video.
	TypeVideo = "video"
)

// Types lists every task type: the one set a spec's type (CreateTask,
// UpdateTask) and the task list's type filter accept.
func Types() []string {
	return []string{TypeShell, TypePython, TypeScript, TypeNoop, TypeVideo}
}

// CheckType refuses a type that is not one of Types, naming field type
// and the types there are.
func CheckType(typ string) error {
	if slices.Contains(Types(), typ) {
		return nil
	}
	return invalid("type", "must be one of %s, not %q", strings.Join(Types(), ", "), typ)
}

// Distribution modes (docs/api/tasks.md#targeting).
const (
	ModeSingle    = "single"
	ModeBroadcast = "broadcast"
	ModeScatter   = "scatter"
)

// Spec is what the submitter chose, with defaults filled in.
type Spec struct {
	Name              string            `json:"name"`
	Type              string            `json:"type"`
	Command           string            `json:"command"`
	Args              []string          `json:"args,omitempty"`
	Workdir           string            `json:"workdir,omitempty"`
	Env               map[string]string `json:"env,omitempty"`
	Timeout           int               `json:"timeout"`     // seconds
	Priority          int               `json:"priority"`    // 1 (highest) … 10
	RetryDelay        int               `json:"retry_delay"` // seconds
	MaxRetries        int               `json:"max_retries"`
	MachineID         string            `json:"machine_id,omitempty"` // hard target
	TargetIP          string            `json:"target_ip,omitempty"`  // hard target by agent address
	GroupID           string            `json:"group_id,omitempty"`
	ParentID          string            `json:"parent_id,omitempty"`
	DependsOn         []string          `json:"depends_on,omitempty"`
	Mode              string            `json:"mode,omitempty"`   // single, broadcast, scatter
	Labels            []string          `json:"labels,omitempty"` // required machine labels, never relaxed
	ScatterCount      int               `json:"scatter_count,omitempty"`
	LeaseTTL          int               `json:"lease_ttl_sec"`
	RenewInterval     int               `json:"renew_interval_sec"`
	HeartbeatInterval int               `json:"heartbeat_interval_sec"`
	GracePeriod       int               `json:"grace_period_sec"`
	Queue             string            `json:"queue,omitempty"`
	// Resources are Kubernetes quantity strings by resource name; the quota
	// service counts them against the task's queue.
	Resources map[string]string `json:"resources,omitempty"`
	// Quota is the tenant's GU quota the task runs under.
	Quota string `json:"quota,omitempty"`
	Video *Video `json:"video,omitempty"`
	// Checkpoint: the task saves a checkpoint when it is preempted or
	// suspended and resumes from it (docs/api/tasks.md#checkpoints).
	Checkpoint bool `json:"checkpoint_enabled,omitempty"`
	// Artifacts are output globs, relative to the working directory,
	// uploaded after the task ends (docs/api/tasks.md#artifacts).
	Artifacts []string `json:"artifacts,omitempty"`
	// Webhook is where the task's completion, final failure or
	// cancellation is notified ("" = the tenant's default endpoint).
	Webhook string `json:"webhook,omitempty"`
}

// Video is a validated video-generation request (docs/api/video.md); the
// video API checks the documented limits before it becomes a task.
type Video struct {
	Model          string `json:"model"`
	Type           string `json:"type"` // text_to_video or image_to_video
	Prompt         string `json:"prompt"`
	NegativePrompt string `json:"negative_prompt,omitempty"`
	PromptExtend   bool   `json:"prompt_extend,omitempty"`
	ActualPrompt   string `json:"actual_prompt,omitempty"`
	ImageURL       string `json:"image_url,omitempty"`
	ImageObjectKey string `json:"image_object_key,omitempty"`
	Resolution     string `json:"resolution"` // 480P, 720P, 1080P
	Width          int    `json:"width"`
	Height         int    `json:"height"`
	Duration       int    `json:"duration"` // seconds
	FrameNum       int    `json:"frame_num"`
	Seed           int    `json:"seed"`
	Watermark      bool   `json:"watermark,omitempty"`
}

// Defaults of a task spec's unset fields (docs/api/tasks.md#taskspec).
const (
	DefaultPriority          = 5
	DefaultMaxRetries        = 3
	DefaultRetryDelay        = 60
	DefaultTimeout           = 3600
	DefaultLeaseTTL          = 300
	DefaultRenewInterval     = 60
	DefaultHeartbeatInterval = 30
	DefaultGracePeriod       = 30
)

// InlineResultLimit and InlineTail: a result whose stdout or stderr has
// InlineResultLimit bytes or more is kept in the object store
// (storage_type s3), not with the task ("< 64KB: the database, >= 64KB:
// the object store"), and the task keeps each stream's last InlineTail
// bytes inline (docs/api/tasks.md, GetTaskResult).
const (
	InlineResultLimit = 64 << 10
	InlineTail        = 32 << 10
)

// Result is where an attempt's output is kept.
type Result struct {
	StorageType string `json:"storage_type"` // db or s3
	Stdout      string `json:"stdout,omitempty"`
	Stderr      string `json:"stderr,omitempty"`
	ObjectKey   string `json:"object_key,omitempty"`
	SizeBytes   int64  `json:"size_bytes,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
	// Artifacts are the output files the attempt uploaded.
	Artifacts []Artifact `json:"artifacts,omitempty"`
}

// Artifact is one output file of an attempt in the object store.
type Artifact struct {
	Path   string `json:"path"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// Checkpoint is the last checkpoint a cooperative task saved; its next run
// gets it back.
type Checkpoint struct {
	Key       string    `json:"key"`
	SizeBytes int64     `json:"size_bytes"`
	SHA256    string    `json:"sha256,omitempty"`
	AttemptID string    `json:"attempt_id"`
	SavedAt   time.Time `json:"saved_at"`
}

// Preemption is the record of a task's last preemption (PreemptedTask in
// docs/api/tasks.md#checkpoints): kept after the task runs again.
type Preemption struct {
	Checkpoint  string    `json:"checkpoint,omitempty"`
	PreemptedAt time.Time `json:"preempted_at"`
	PreemptedBy string    `json:"preempted_by"`
}

// Task is the aggregate's state: everything the task API shows.
type Task struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenant_id"`
	CreatedBy string `json:"created_by,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	FanoutID  string `json:"fanout_id,omitempty"`
	Spec      Spec   `json:"spec"`
	Version   int64  `json:"version"`

	Status     Status  `json:"status"`
	RetryCount int     `json:"retry_count"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	Error      string  `json:"error,omitempty"`
	Result     *Result `json:"result,omitempty"`

	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	AssignedAt      time.Time `json:"assigned_at,omitzero"`
	StartedAt       time.Time `json:"started_at,omitzero"`
	EndedAt         time.Time `json:"ended_at,omitzero"`
	RetryAt         time.Time `json:"retry_at,omitzero"`
	LeaseExpiresAt  time.Time `json:"lease_expires_at,omitzero"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at,omitzero"`

	AgentID         string `json:"assigned_agent_id,omitempty"`
	AssignedMachine string `json:"assigned_machine_id,omitempty"`
	AttemptID       string `json:"attempt_id,omitempty"`
	ClaimRequestID  string `json:"claim_request_id,omitempty"`

	Progress        int    `json:"progress"`
	ProgressMessage string `json:"progress_message,omitempty"`
	// PreemptedBy names, while preempted, the task this one made room for,
	// or what outside Taskmesh preempted it as its agent reported ("slurm").
	PreemptedBy string `json:"preempted_by,omitempty"`
	// Preemption is the last preemption, kept after the requeue.
	Preemption *Preemption `json:"preemption,omitempty"`
	// Checkpoint is the last checkpoint saved (cooperative tasks).
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// The last attempt that reported an outcome, so that attempt repeating
	// its complete gets the same answer (idempotency) after the task moved on.
	FinishedAttemptID string    `json:"finished_attempt_id,omitempty"`
	FinishedStatus    Status    `json:"finished_status,omitempty"`
	FinishedAt        time.Time `json:"finished_at,omitzero"`
	Deleted           bool      `json:"deleted,omitempty"`
	// PastAttempts are the task's latest earlier attempts, oldest first (at
	// most MaxPastAttempts), so that an attempt whose lease expired still
	// gets 30003 after the task moved on.
	PastAttempts []PastAttempt `json:"past_attempts,omitempty"`

	// Admission (Kueue's model, decided by the quota service). A task with
	// a ClusterQueue is claimable only while Admitted. AdmissionEpoch is the
	// version of the event that last put the task in its queue; a decision
	// about an earlier stay in the queue no longer applies.
	ClusterQueue   string            `json:"cluster_queue,omitempty"`
	Admitted       bool              `json:"admitted,omitempty"`
	Flavors        map[string]string `json:"flavors,omitempty"`
	AdmissionEpoch int64             `json:"admission_epoch,omitempty"`
	// HeldForDependencies: the task has a ClusterQueue and dependencies
	// and is not in the queue yet; it enters it (DependenciesMet) once they
	// have all completed, so it never holds quota it cannot use. It still
	// awaits admission meanwhile (AwaitingAdmission).
	HeldForDependencies bool `json:"held_for_dependencies,omitempty"`
}

// PastAttempt is an attempt that is no longer the task's current one, or
// the current one after its lease expired.
type PastAttempt struct {
	ID      string `json:"id"`
	AgentID string `json:"agent_id,omitempty"`
	// LeaseExpiresAt is when its lease ran out, when it ran out.
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
	// LeaseExpired: the attempt ended because its lease expired or its
	// agent was lost (TaskLeaseExpired).
	LeaseExpired bool `json:"lease_expired,omitempty"`
	// Preempted: the attempt ended preempted (by Taskmesh or, as its agent
	// reported, by the system it ran in) and the task was requeued.
	Preempted bool `json:"preempted,omitempty"`
}

// MaxPastAttempts bounds PastAttempts. An attempt older than that many
// leases is answered 30001 instead of 30003: its agent has been gone for
// at least as many lease expiries, and the task's state stays small.
const MaxPastAttempts = 16

// Claimable reports whether the task may be leased at now.
func (t *Task) Claimable(now time.Time) bool {
	// RetryAt is set at submission, requeue and lease loss too, so "not
	// before RetryAt" holds for every pending task, not only for retries.
	return t.Status == StatusPending && !t.Deleted && !now.Before(t.RetryAt) && !t.AwaitingAdmission()
}

// AwaitingAdmission reports whether the task is pending in a ClusterQueue
// that has not admitted it yet.
func (t *Task) AwaitingAdmission() bool {
	return t.ClusterQueue != "" && !t.Admitted && t.Status == StatusPending && !t.Deleted
}

// Matches reports whether an agent on machine with labels, address ip and
// task types may run t. Hard constraints are never relaxed.
func (t *Task) Matches(machine, ip string, labels, types []string) bool {
	if t.Spec.MachineID != "" && t.Spec.MachineID != machine {
		return false
	}
	if t.Spec.TargetIP != "" && t.Spec.TargetIP != ip {
		return false
	}
	for _, l := range t.Spec.Labels {
		if !slices.Contains(labels, l) {
			return false
		}
	}
	// An agent that names no types takes every type; one that names some (an
	// agent without ffmpeg leaves video out) takes only those.
	return len(types) == 0 || slices.Contains(types, t.Spec.Type)
}
