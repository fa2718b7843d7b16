package app

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The files an attempt keeps beyond its run (docs/api/tasks.md#checkpoints,
// #artifacts) live under the task's tenant, like results: a key issued for
// one tenant's task can never name another tenant's object.

// checkpointKey is where an attempt's checkpoint archive lives.
func checkpointKey(t domain.Task, attemptID string) string {
	return fmt.Sprintf("checkpoints/%s/%s/%s.tar.gz", t.TenantID, t.ID, attemptID)
}

// artifactKey is where an attempt's artifact at rel (a clean relative
// path) lives.
func artifactKey(t domain.Task, attemptID, rel string) string {
	return fmt.Sprintf("artifacts/%s/%s/%s/%s", t.TenantID, t.ID, attemptID, rel)
}

// currentAttempt reads the task and checks that attemptID of agentID is
// its current attempt (30001 otherwise).
func (a *App) currentAttempt(ctx context.Context, c Caller, id, agentID, attemptID string) (domain.Task, error) {
	if err := c.checkAgent(agentID); err != nil {
		return domain.Task{}, err
	}
	t, err := a.tasks.Get(ctx, c.Tenant, id)
	if err != nil {
		return domain.Task{}, err
	}
	if t.AttemptID != attemptID || t.AgentID != agentID {
		return domain.Task{}, domain.ErrAttemptMismatch
	}
	if a.objects == nil {
		return domain.Task{}, &domain.InvalidError{Field: "object_store", Reason: "no object store is configured"}
	}
	return t, nil
}

// presignUpload issues the upload link of key. With sha256 (hex) the link
// takes only that body, so using it again after the upload cannot change
// what the attempt recorded.
func (a *App) presignUpload(ctx context.Context, key string, size int64, contentType, sha256 string) (Upload, error) {
	url, headers, err := a.objects.PresignPut(ctx, key, a.cfg.UploadURLTTL, size, contentType, sha256)
	if err != nil {
		return Upload{}, fmt.Errorf("presign upload: %w", err)
	}
	return Upload{URL: url, Headers: headers, Key: key, ExpiresAt: a.now().Add(a.cfg.UploadURLTTL)}, nil
}

// CreateCheckpointUpload issues a presigned PUT for the attempt's
// checkpoint archive. The attempt must be current and the task
// cooperative; a preempted or suspended attempt may still save one.
func (a *App) CreateCheckpointUpload(ctx context.Context, c Caller, id, agentID, attemptID string, size int64, sha256 string) (Upload, error) {
	t, err := a.currentAttempt(ctx, c, id, agentID, attemptID)
	if err != nil {
		return Upload{}, err
	}
	// The same checks RecordCheckpoint will make, so an upload that could
	// never be recorded is refused before its bytes travel.
	if _, err := t.RecordCheckpoint(a.now(), agentID, attemptID, checkpointKey(t, attemptID), size, ""); err != nil {
		return Upload{}, err
	}
	return a.presignUpload(ctx, checkpointKey(t, attemptID), size, "application/gzip", sha256)
}

// RecordTaskCheckpoint records the uploaded checkpoint as the task's
// latest. The key must be the one issued to this attempt and the object
// must exist with the reported size.
func (a *App) RecordTaskCheckpoint(ctx context.Context, c Caller, id, agentID, attemptID string, o ResultObject) (domain.Task, error) {
	t, err := a.currentAttempt(ctx, c, id, agentID, attemptID)
	if err != nil {
		return domain.Task{}, err
	}
	if o.Key != checkpointKey(t, attemptID) {
		return domain.Task{}, &domain.InvalidError{Field: "object_key", Reason: "is not the key issued to this attempt"}
	}
	if err := a.checkStored(ctx, "object_key", o); err != nil {
		return domain.Task{}, err
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.RecordCheckpoint(now, agentID, attemptID, o.Key, o.Size, o.SHA256)
	})
}

// checkStored checks that the object o names exists with its size and
// checksum.
func (a *App) checkStored(ctx context.Context, field string, o ResultObject) error {
	info, err := a.objects.Stat(ctx, o.Key)
	if errors.Is(err, objectstore.ErrNotFound) {
		return &domain.InvalidError{Field: field, Reason: "was not uploaded"}
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", o.Key, err)
	}
	if info.Size != o.Size || (o.SHA256 != "" && info.SHA256 != "" && info.SHA256 != o.SHA256) {
		return &domain.InvalidError{Field: field, Reason: fmt.Sprintf("stored object has %d bytes and sha256 %s, not what was reported", info.Size, info.SHA256)}
	}
	return nil
}

// CheckpointLink is where the attempt that restores a checkpoint reads it.
type CheckpointLink struct {
	Checkpoint *domain.Checkpoint // nil: the task has none and starts afresh
	URL        string
}

// GetTaskCheckpoint returns a presigned link to the task's latest
// checkpoint for its current attempt.
func (a *App) GetTaskCheckpoint(ctx context.Context, c Caller, id, agentID, attemptID string) (CheckpointLink, error) {
	t, err := a.currentAttempt(ctx, c, id, agentID, attemptID)
	if err != nil {
		return CheckpointLink{}, err
	}
	if t.Checkpoint == nil {
		return CheckpointLink{}, nil
	}
	url, err := a.objects.PresignGet(ctx, t.Checkpoint.Key, a.cfg.UploadURLTTL)
	if err != nil {
		return CheckpointLink{}, fmt.Errorf("presign checkpoint: %w", err)
	}
	return CheckpointLink{Checkpoint: t.Checkpoint, URL: url}, nil
}

// cleanArtifactPath checks an artifact's path as the agent reports it: a
// clean path relative to the working directory that stays inside it, and
// whose names the object store can keep (its key alphabet,
// docs/api/tasks.md#artifacts). A file it cannot keep is refused here as
// bad input, which the agent skips, rather than failing at the store.
func cleanArtifactPath(p string) (string, error) {
	c := path.Clean(p)
	if p == "" || path.IsAbs(p) || c != p || c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(p, 0) {
		return "", &domain.InvalidError{Field: "path", Reason: fmt.Sprintf("%q is not a clean path inside the working directory", p)}
	}
	if err := objectstore.ValidateKey(c); err != nil {
		return "", &domain.InvalidError{Field: "path", Reason: fmt.Sprintf("%q cannot be kept: artifact names use the letters A-Z and a-z, digits, '.', '_', '-' and '/' between folders", p)}
	}
	return c, nil
}

// CreateArtifactUpload issues a presigned PUT for one artifact of the
// current attempt: a file the task's artifacts globs match. The agent
// uploads artifacts after the process ended and before CompleteTask.
func (a *App) CreateArtifactUpload(ctx context.Context, c Caller, id, agentID, attemptID, rel string, size int64, sha256 string) (Upload, error) {
	t, err := a.currentAttempt(ctx, c, id, agentID, attemptID)
	if err != nil {
		return Upload{}, err
	}
	if !t.Status.Leased() {
		return Upload{}, fmt.Errorf("%w: the task is %s", domain.ErrImmutable, t.Status)
	}
	rel, err = cleanArtifactPath(rel)
	if err != nil {
		return Upload{}, err
	}
	if !matchesAny(t.Spec.Artifacts, rel) {
		return Upload{}, &domain.InvalidError{Field: "path", Reason: fmt.Sprintf("%q matches none of the task's artifacts globs", rel)}
	}
	return a.presignUpload(ctx, artifactKey(t, attemptID, rel), size, "application/octet-stream", sha256)
}

func matchesAny(globs []string, rel string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, rel); ok {
			return true
		}
	}
	return false
}

// ReportedArtifact is one artifact an agent lists with CompleteTask.
type ReportedArtifact struct {
	Path, SHA256 string
	Size         int64
}

// checkArtifacts turns the artifacts an attempt reported into the ones its
// result lists: each uploaded under the key issued for its path, with the
// reported size.
func (a *App) checkArtifacts(ctx context.Context, t domain.Task, attemptID string, in []ReportedArtifact) ([]domain.Artifact, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if a.objects == nil {
		return nil, &domain.InvalidError{Field: "artifacts", Reason: "no object store is configured"}
	}
	out := make([]domain.Artifact, 0, len(in))
	for _, r := range in {
		rel, err := cleanArtifactPath(r.Path)
		if err != nil {
			return nil, &domain.InvalidError{Field: "artifacts", Reason: err.(*domain.InvalidError).Reason}
		}
		key := artifactKey(t, attemptID, rel)
		if err := a.checkStored(ctx, "artifacts", ResultObject{Key: key, Size: r.Size, SHA256: r.SHA256}); err != nil {
			return nil, err
		}
		out = append(out, domain.Artifact{Path: rel, Key: key, Size: r.Size, SHA256: r.SHA256})
	}
	return out, nil
}

// ArtifactLink is an artifact with a presigned download link.
type ArtifactLink struct {
	domain.Artifact
	URL string
}
