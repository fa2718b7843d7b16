package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/artifacts"
	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
	"github.com/taskmesh/taskmesh/services/executor/internal/checkpoint"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// The files an attempt keeps beyond its process (docs/api/tasks.md#checkpoints,
// #artifacts). A cooperative task's checkpoint directory is
// <run dir>/checkpoint: restored before the process starts, packed and
// uploaded after it stopped for a preemption or suspension, before the
// attempt ends (so the server still lists the attempt as running on this
// agent while it saves). Artifacts are uploaded when the outcome is
// delivered, before CompleteTask names them.

// filesOf is what the attempt keeps: from memory for an attempt this
// process claimed, else from the journal; a journal error counts as
// nothing.
func (a *Agent) filesOf(t journal.Task) journal.AttemptFiles {
	a.mu.Lock()
	f, ok := a.keeps[t.AttemptID]
	a.mu.Unlock()
	if ok {
		return f
	}
	f, err := a.journal.AttemptFiles(journalCtx, t.AttemptID)
	if err != nil {
		a.log.Warn("journal", "attempt_id", t.AttemptID, "err", err)
	}
	return f
}

// rememberFiles keeps f in memory for a claimed attempt once the journal
// has it.
func (a *Agent) rememberFiles(attemptID string, f journal.AttemptFiles) {
	a.mu.Lock()
	a.keeps[attemptID] = f
	a.mu.Unlock()
}

// settled removes what an attempt whose outcome is settled (delivered,
// refused for good, or local) left: its cgroup (kept for a later attempt
// when it can be), its run directory and what memory kept of it. The
// cgroup goes first: an attempt recovered after a restart names it only in
// the spec in its run directory.
func (a *Agent) settled(t journal.Task) {
	a.mu.Lock()
	delete(a.keeps, t.AttemptID)
	a.mu.Unlock()
	a.isolation.Recycle(t.AttemptID, func() *cgroup.Group {
		if t.RunDir == "" {
			return nil
		}
		spec, err := shim.ReadSpec(t.RunDir)
		if err != nil {
			return nil
		}
		return spec.Cgroup
	})
	a.cleanup(t.RunDir)
}

// filesFromClaim is what a claimed task declared.
func filesFromClaim(t *taskv1.Task) journal.AttemptFiles {
	return journal.AttemptFiles{Checkpoint: t.GetCheckpoint().GetEnabled(), Artifacts: t.GetArtifacts()}
}

// prepareCheckpoint makes the attempt's checkpoint directory, restores the
// task's last checkpoint into it, and returns the environment entry that
// names it ("" for a task that does not checkpoint). A checkpoint that
// cannot be restored fails the attempt: started without it, the task
// would silently redo its work.
func (a *Agent) prepareCheckpoint(ctx context.Context, t journal.Task, runDir string) (string, error) {
	if !a.filesOf(t).Checkpoint {
		return "", nil
	}
	dir := filepath.Join(runDir, checkpoint.DirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("checkpoint dir: %w", err)
	}
	if t.Origin != journal.OriginServer || a.files == nil || !checkpoint.Empty(dir) {
		// Not empty: a restarted agent re-spawning the attempt keeps what
		// it restored (or the process wrote) before.
		return checkpoint.EnvVar + "=" + dir, nil
	}
	cctx, cancel := a.rpcCtx(ctx)
	link, err := a.files.GetTaskCheckpoint(cctx, &taskv1.GetTaskCheckpointRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID,
	})
	cancel()
	if err != nil {
		return "", fmt.Errorf("restore checkpoint: %w", err)
	}
	if link.GetDownloadUrl() == "" {
		return checkpoint.EnvVar + "=" + dir, nil // the first run
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link.GetDownloadUrl(), nil)
	if err != nil {
		return "", err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("restore checkpoint: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("restore checkpoint: download %s", resp.Status)
	}
	if err := checkpoint.Unpack(resp.Body, dir); err != nil {
		return "", err
	}
	a.log.Info("checkpoint restored", "task_id", t.ID, "attempt_id", t.AttemptID, "checkpoint", link.GetObjectKey())
	return checkpoint.EnvVar + "=" + dir, nil
}

// saveCheckpoint uploads what a cooperative attempt stopped for reason
// wrote into its checkpoint directory and records it with the server.
// Failures are logged: the task then resumes from its previous checkpoint
// (or from the start), which is what a generic task always does.
func (a *Agent) saveCheckpoint(ctx context.Context, at *attempt, reason string) {
	t := at.task
	// task_final too: the attempt may learn of its preemption or
	// suspension from a refused progress report or renewal (30002) before
	// its heartbeat names the reason. The server accepts the checkpoint only
	// from an attempt that still holds a preempted or suspended task, and
	// refuses it for a cancelled or finished one.
	if (reason != reasonPreempted && reason != reasonSuspended && reason != reasonTaskFinal) ||
		t.Origin != journal.OriginServer || a.files == nil || t.RunDir == "" || !a.filesOf(t).Checkpoint {
		return
	}
	dir := filepath.Join(t.RunDir, checkpoint.DirName)
	log := a.log.With("task_id", t.ID, "attempt_id", t.AttemptID)
	if checkpoint.Empty(dir) {
		log.Warn("cooperative task stopped without writing a checkpoint", "reason", reason)
		return
	}
	if err := a.uploadCheckpoint(ctx, t, dir); err != nil {
		log.Error("checkpoint not saved", "err", err)
		return
	}
	log.Info("checkpoint saved", "reason", reason)
}

func (a *Agent) uploadCheckpoint(ctx context.Context, t journal.Task, dir string) error {
	archive := filepath.Join(t.RunDir, "checkpoint.tar.gz")
	size, digest, err := checkpoint.PackFile(dir, archive)
	if err != nil {
		return err
	}
	cctx, cancel := a.rpcCtx(ctx)
	up, err := a.files.CreateCheckpointUpload(cctx, &taskv1.CreateCheckpointUploadRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID, SizeBytes: size, Sha256: digest,
	})
	cancel()
	if err != nil {
		return err
	}
	if err := a.putFile(ctx, up.GetUploadUrl(), up.GetHeaders(), archive, size, "application/gzip"); err != nil {
		return err
	}
	cctx, cancel = a.rpcCtx(ctx)
	defer cancel()
	_, err = a.files.RecordTaskCheckpoint(cctx, &taskv1.RecordTaskCheckpointRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID, ObjectKey: up.GetObjectKey(), SizeBytes: size, Sha256: digest,
	})
	return err
}

// putFile PUTs the file at p (size bytes) to a presigned URL.
func (a *Agent) putFile(ctx context.Context, url string, headers map[string]string, p string, size int64, contentType string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", contentType)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("put %s: %w", filepath.Base(p), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("put %s: %s", filepath.Base(p), resp.Status)
	}
	return nil
}

// workdirOf is the working directory the attempt ran in (see prepare).
func (a *Agent) workdirOf(t journal.Task) string {
	if t.Workdir != "" {
		return t.Workdir
	}
	return filepath.Join(a.cfg.WorkRoot, safeName(t.ID))
}

// errNoArtifactService: artifacts were declared but the agent has no
// server to upload them to.
var errNoArtifactService = errors.New("no server to upload artifacts to")

// uploadArtifacts uploads the files the task's artifacts globs match in
// its working directory and returns them for CompleteTask. A repeated
// delivery uploads them again under the same keys.
func (a *Agent) uploadArtifacts(ctx context.Context, t journal.Task) ([]*taskv1.Artifact, error) {
	globs := a.filesOf(t).Artifacts
	if len(globs) == 0 {
		return nil, nil
	}
	if a.files == nil {
		return nil, errNoArtifactService
	}
	found, truncated, err := artifacts.Find(a.workdirOf(t), globs)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil // nothing ran there (refused before start)
		}
		return nil, err
	}
	if truncated {
		a.log.Warn("more artifacts than kept", "task_id", t.ID, "kept", artifacts.MaxFiles)
	}
	out := make([]*taskv1.Artifact, 0, len(found))
	for _, f := range found {
		cctx, cancel := a.rpcCtx(ctx)
		up, err := a.files.CreateArtifactUpload(cctx, &taskv1.CreateArtifactUploadRequest{
			TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID, Path: f.Path, SizeBytes: f.Size, Sha256: f.SHA256,
		})
		cancel()
		if rpcerr.Code(err) == rpcerr.InvalidArgument {
			// Refused for good: a name the object store cannot keep (a
			// space, non-ASCII letters), or no object store at all. The
			// other files are still kept.
			a.log.Warn("artifact not kept", "task_id", t.ID, "path", f.Path, "err", rpcerr.Message(err))
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := a.putFile(ctx, up.GetUploadUrl(), up.GetHeaders(), f.Abs, f.Size, "application/octet-stream"); err != nil {
			return nil, err
		}
		out = append(out, &taskv1.Artifact{Path: f.Path, Size: f.Size, Sha256: f.SHA256})
	}
	return out, nil
}
