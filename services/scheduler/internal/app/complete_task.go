package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// ResultObject names a result the agent uploaded.
type ResultObject struct {
	Key    string
	Size   int64
	SHA256 string
}

// Completion is an agent's report of an attempt's end.
type Completion struct {
	AgentID, AttemptID string
	ExitCode           int
	Stdout, Stderr     string
	Error              string
	Object             *ResultObject
	EndedAt            time.Time
	// PreemptedBy: the attempt was taken away outside Taskmesh (e.g.
	// "slurm"); it ends preempted and the task is requeued without using a
	// retry. Its output, result object and artifacts are not kept.
	PreemptedBy string
	// Cancelled: someone on the agent's machine cancelled the attempt; the
	// task ends cancelled. Its output, result object and artifacts are
	// not kept.
	Cancelled bool
	// Artifacts the attempt uploaded (CreateArtifactUpload).
	Artifacts []ReportedArtifact
}

// CompleteTask records the attempt's outcome. Repeating it for the same
// attempt succeeds without recording anything. A result object must be the
// one issued to this attempt (CreateResultUpload) and must exist with the
// reported size and checksum.
func (a *App) CompleteTask(ctx context.Context, c Caller, id string, r Completion) (domain.Task, error) {
	if err := c.checkAgent(r.AgentID); err != nil {
		return domain.Task{}, err
	}
	if r.PreemptedBy != "" || r.Cancelled {
		// The attempt's output is not the task's result: another attempt
		// runs it, or the task ends cancelled, without one.
		r.Stdout, r.Stderr, r.Object, r.Artifacts = "", "", nil, nil
	}
	if r.Object == nil && (len(r.Stdout) >= domain.InlineResultLimit || len(r.Stderr) >= domain.InlineResultLimit) {
		var err error
		if r, err = a.spillResult(ctx, c, id, r); err != nil {
			return domain.Task{}, err
		}
	}
	result := &domain.Result{StorageType: "db", Stdout: r.Stdout, Stderr: r.Stderr}
	var artifacts []domain.Artifact
	if r.Object != nil || len(r.Artifacts) > 0 {
		current, err := a.tasks.Get(ctx, c.Tenant, id)
		if err != nil {
			return domain.Task{}, err
		}
		if r.Object != nil {
			if err := a.checkObject(ctx, current, r.AttemptID, *r.Object); err != nil {
				return domain.Task{}, err
			}
			result = &domain.Result{StorageType: "s3", Stdout: r.Stdout, Stderr: r.Stderr, ObjectKey: r.Object.Key,
				SizeBytes: r.Object.Size, SHA256: r.Object.SHA256}
		}
		if artifacts, err = a.checkArtifacts(ctx, current, r.AttemptID, r.Artifacts); err != nil {
			return domain.Task{}, err
		}
		result.Artifacts = artifacts
	}
	if r.Stdout == "" && r.Stderr == "" && r.Object == nil && len(artifacts) == 0 {
		result = nil
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		recs, _, err := t.Complete(now, r.AgentID, r.AttemptID, domain.Outcome{ExitCode: r.ExitCode, Error: r.Error,
			Result: result, EndedAt: r.EndedAt, PreemptedBy: r.PreemptedBy, Cancelled: r.Cancelled})
		return recs, err
	})
}

// spillResult stores output reported inline that is too large to keep
// with the task (domain.InlineResultLimit or more of a stream) as the
// attempt's result object, as an agent that uploads its own large
// results would have: the whole output as JSON under the attempt's result
// key. The completion then names that object and keeps only each
// stream's last InlineTail bytes inline. Nothing is stored unless the
// attempt is the task's current one: another attempt's completion is
// refused by the task's decision anyway, and must not write objects.
func (a *App) spillResult(ctx context.Context, c Caller, id string, r Completion) (Completion, error) {
	t, err := a.tasks.Get(ctx, c.Tenant, id)
	if err != nil || t.AttemptID != r.AttemptID || r.AttemptID == "" {
		return r, err
	}
	if a.objects == nil {
		return r, &domain.InvalidError{Field: "stdout", Reason: fmt.Sprintf(
			"output of %d bytes or more goes to the object store, and none is configured", domain.InlineResultLimit)}
	}
	body, err := json.Marshal(struct {
		Stdout               string `json:"stdout"`
		Stderr               string `json:"stderr"`
		StdoutTruncatedBytes int64  `json:"stdout_truncated_bytes"`
		StderrTruncatedBytes int64  `json:"stderr_truncated_bytes"`
	}{Stdout: r.Stdout, Stderr: r.Stderr})
	if err != nil {
		return r, err
	}
	key := resultKey(t, r.AttemptID)
	info, err := a.objects.Put(ctx, key, bytes.NewReader(body), int64(len(body)), "application/json")
	if err != nil {
		return r, fmt.Errorf("store the result of %s: %w", id, err)
	}
	sum := sha256.Sum256(body)
	r.Object = &ResultObject{Key: key, Size: info.Size, SHA256: hex.EncodeToString(sum[:])}
	r.Stdout, r.Stderr = textcut.Tail(r.Stdout, domain.InlineTail), textcut.Tail(r.Stderr, domain.InlineTail)
	return r, nil
}

// resultKey is where an attempt's large result lives: under the task's
// tenant, so links can never point into another tenant's results. A video
// task's result is its MP4 (the runner uploads the video as the task's
// result object, content type video/mp4).
func resultKey(t domain.Task, attemptID string) string {
	ext := "json"
	if t.Spec.Type == domain.TypeVideo {
		ext = "mp4"
	}
	return fmt.Sprintf("results/%s/%s/%s.%s", t.TenantID, t.ID, attemptID, ext)
}

func (a *App) checkObject(ctx context.Context, t domain.Task, attemptID string, o ResultObject) error {
	if o.Key != resultKey(t, attemptID) {
		return &domain.InvalidError{Field: "result_object.key", Reason: "is not the key issued to this attempt"}
	}
	if a.objects == nil {
		return &domain.InvalidError{Field: "result_object", Reason: "no object store is configured"}
	}
	info, err := a.objects.Stat(ctx, o.Key)
	if errors.Is(err, objectstore.ErrNotFound) {
		return &domain.InvalidError{Field: "result_object", Reason: "was not uploaded"}
	}
	if err != nil {
		return fmt.Errorf("stat result %s: %w", o.Key, err)
	}
	if info.Size != o.Size || (o.SHA256 != "" && info.SHA256 != "" && info.SHA256 != o.SHA256) {
		return &domain.InvalidError{Field: "result_object", Reason: fmt.Sprintf("stored object has %d bytes and sha256 %s, not what was reported", info.Size, info.SHA256)}
	}
	return nil
}

// Upload is where an agent PUTs a large result.
type Upload struct {
	URL       string
	Headers   map[string]string
	Key       string
	ExpiresAt time.Time
}

// CreateResultUpload issues a presigned PUT for the current attempt's result.
func (a *App) CreateResultUpload(ctx context.Context, c Caller, id, agentID, attemptID string, size int64, contentType, sha256 string) (Upload, error) {
	if err := c.checkAgent(agentID); err != nil {
		return Upload{}, err
	}
	if a.objects == nil {
		return Upload{}, &domain.InvalidError{Field: "result", Reason: "no object store is configured for large results"}
	}
	t, err := a.tasks.Get(ctx, c.Tenant, id)
	if err != nil {
		return Upload{}, err
	}
	if t.AttemptID != attemptID || t.AgentID != agentID {
		return Upload{}, domain.ErrAttemptMismatch
	}
	if !t.Status.Leased() {
		return Upload{}, fmt.Errorf("%w: the task is %s", domain.ErrImmutable, t.Status)
	}
	if contentType == "" {
		contentType = "application/json"
		if t.Spec.Type == domain.TypeVideo {
			contentType = "video/mp4"
		}
	}
	return a.presignUpload(ctx, resultKey(t, attemptID), size, contentType, sha256)
}

// Result is a finished task's output as the result API shows it.
type Result struct {
	Task         domain.Task
	PresignedURL string
	ExpiresIn    time.Duration
	// Artifacts of the last attempt, each with a link valid ExpiresIn.
	Artifacts []ArtifactLink
}

// GetResult returns where the task's output is: inline, or a link to the
// object store valid for ResultURLTTL. A task without an outcome yet
// answers with its status and no result.
func (a *App) GetResult(ctx context.Context, c Caller, id string) (Result, error) {
	t, err := a.GetTask(ctx, c, id)
	if err != nil {
		return Result{}, err
	}
	out := Result{Task: t}
	if t.Result != nil && t.Result.ObjectKey != "" {
		if a.objects == nil {
			return Result{}, errors.New("result is in the object store but none is configured")
		}
		// Its end is when the result was stored, near enough: past the
		// retention it is gone (or about to be), and a link would 404.
		if !t.EndedAt.IsZero() && a.now().Sub(t.EndedAt) > a.cfg.ResultRetention {
			return Result{}, fmt.Errorf("%w: task %s's result was kept %s", ErrResultExpired, t.ID, a.cfg.ResultRetention)
		}
		url, err := a.objects.PresignGet(ctx, t.Result.ObjectKey, a.cfg.ResultURLTTL)
		if err != nil {
			return Result{}, fmt.Errorf("presign result: %w", err)
		}
		out.PresignedURL, out.ExpiresIn = url, a.cfg.ResultURLTTL
	}
	if t.Result != nil && len(t.Result.Artifacts) > 0 {
		if a.objects == nil {
			return Result{}, errors.New("artifacts are in the object store but none is configured")
		}
		for _, art := range t.Result.Artifacts {
			url, err := a.objects.PresignGet(ctx, art.Key, a.cfg.ResultURLTTL)
			if err != nil {
				return Result{}, fmt.Errorf("presign artifact: %w", err)
			}
			out.Artifacts = append(out.Artifacts, ArtifactLink{Artifact: art, URL: url})
		}
		out.ExpiresIn = a.cfg.ResultURLTTL
	}
	return out, nil
}
