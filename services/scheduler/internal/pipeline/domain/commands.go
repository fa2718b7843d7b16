package domain

import (
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/textcut"
)

// Submit records a new job whose inputs are in place, submitted by actor
// from address ip; it starts in its ONNX stage.
func Submit(now time.Time, id, tenant, actor, ip string, inputs Inputs, keys InputKeys) []Record {
	return []Record{{Event: Submitted{ID: id, TenantID: tenant, Inputs: inputs, Keys: keys}, At: now, Actor: actor, IP: ip}}
}

// current reports whether the job is in stage s and not done.
func (j Job) current(s Stage) bool { return !j.Status.Final() && j.Stage == s }

// foreign reports whether taskID is not the task the job queued for s:
// only the stage's own task may move the job.
func (j Job) foreign(s Stage, taskID string) bool {
	known := j.StageTasks[s]
	return known != "" && known != taskID
}

// QueueStage records that stage s's task was created. It records nothing
// when the job is no longer in s (its task already reported) or the stage
// is already queued.
func (j Job) QueueStage(now time.Time, actor string, s Stage, taskID string) []Record {
	if !j.current(s) || j.StageTasks[s] != "" {
		return nil
	}
	return []Record{{Event: StageQueued{Stage: s, TaskID: taskID}, At: now, Actor: actor}}
}

// ReportProgress records the progress (clamped to 0-100) stage s's task reported,
// when the job is in s and it changed.
func (j Job) ReportProgress(now time.Time, actor string, s Stage, taskID string, progress int, message string) []Record {
	progress = min(max(progress, 0), 100)
	message = textcut.Bytes(message, 256)
	if !j.current(s) || j.foreign(s, taskID) || (progress == j.Progress && message == j.Message) {
		return nil
	}
	return []Record{{Event: Progressed{Stage: s, Progress: progress, Message: message}, At: now, Actor: actor}}
}

// StageDone records that stage s's task completed with its output stored
// at output: the job moves to the next stage, or is COMPLETED after nef.
func (j Job) StageDone(now time.Time, actor string, s Stage, taskID, output string) []Record {
	if !j.current(s) || j.foreign(s, taskID) {
		return nil
	}
	return []Record{{Event: StageSucceeded{Stage: s, TaskID: taskID, Output: output}, At: now, Actor: actor}}
}

// Fail records that stage s failed for reason (taskID may be empty when
// no task ran, e.g. the stage could not be queued); the job is FAILED.
func (j Job) Fail(now time.Time, actor string, s Stage, taskID, reason string) []Record {
	if !j.current(s) || (taskID != "" && j.foreign(s, taskID)) {
		return nil
	}
	reason = textcut.Bytes(strings.TrimSpace(reason), MaxReasonBytes)
	if reason == "" {
		reason = "the " + string(s) + " stage failed"
	}
	return []Record{{Event: Failed{Step: s, Reason: reason, TaskID: taskID}, At: now, Actor: actor}}
}
