package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// errBusy: another goroutine is delivering the same attempt right now.
var errBusy = errors.New("delivery in progress")

// errResultLost: the result to upload is gone from the run directory.
var errResultLost = errors.New("result lost")

// errNoServer: the agent runs without a server.
var errNoServer = errors.New("no server configured")

// deliverLive delivers a fresh outcome at once, unless older outcomes are
// waiting: then the sync loop delivers it after them, keeping end-time
// order.
func (a *Agent) deliverLive(ctx context.Context, attemptID string) {
	if a.backlog.Load() {
		wake(a.syncWake)
		return
	}
	if err := a.deliver(ctx, attemptID); err != nil {
		a.backlog.Store(true)
		wake(a.syncWake)
	}
}

// syncLoop delivers unsynced outcomes, oldest end first and several at
// once (deliverBatch), backing off while the server is unreachable
// (docs/decisions/0010-agent-sqlite-journal.md).
func (a *Agent) syncLoop(ctx context.Context) {
	bo := backoffDelay{base: 500 * time.Millisecond, limit: 30 * time.Second}
	var retry <-chan time.Time
	wake(a.syncWake) // outcomes left by a previous run
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.syncWake:
		case <-retry:
		}
		if caughtUp := a.deliverUnsynced(ctx); caughtUp {
			bo.reset()
			retry = nil
		} else {
			retry = time.After(bo.next())
		}
	}
}

// deliverUnsynced delivers outcomes until nothing is unsynced (caughtUp)
// or a delivery or the journal fails or ctx ends (not caughtUp: the
// caller retries after a backoff).
func (a *Agent) deliverUnsynced(ctx context.Context) (caughtUp bool) {
	for ctx.Err() == nil {
		rows, err := a.journal.Unsynced(journalCtx, 4*a.cfg.SyncParallel)
		if err != nil {
			a.log.Error("journal", "err", err)
			return false
		}
		if len(rows) == 0 {
			a.backlog.Store(false)
			return true
		}
		a.backlog.Store(true)
		if !a.deliverBatch(ctx, rows) {
			return false
		}
	}
	return false
}

// deliverBatch delivers rows, SyncParallel at a time, each started in the
// order the attempts ended (Unsynced's order). It returns once every
// delivery it started has settled, so the next Unsynced read sees none in
// flight; after a failure it starts no more. The server takes outcomes in
// any order: each names its attempt, and a stale one is refused whenever
// it arrives (docs/decisions/0010-agent-sqlite-journal.md).
func (a *Agent) deliverBatch(ctx context.Context, rows []journal.Task) (ok bool) {
	var (
		failed atomic.Bool
		wg     sync.WaitGroup
	)
	slots := make(chan struct{}, a.cfg.SyncParallel)
	for _, t := range rows {
		slots <- struct{}{}
		if failed.Load() || ctx.Err() != nil {
			<-slots
			break
		}
		wg.Add(1)
		go func(attemptID string) {
			defer wg.Done()
			defer func() { <-slots }()
			if err := a.deliver(ctx, attemptID); err != nil {
				failed.Store(true)
			}
		}(t.AttemptID)
	}
	wg.Wait()
	return !failed.Load() && ctx.Err() == nil
}

// deliver sends one outcome: the result object first when the output is
// large, then CompleteTask. A definitive answer marks the row synced: the
// server took it, or it refused it for good (the attempt is not ours any
// more, or the request can never succeed). Anything else is left for a
// retry.
func (a *Agent) deliver(ctx context.Context, attemptID string) error {
	if a.lease == nil {
		// No server configured (any more): the outcome waits in the journal.
		return errNoServer
	}
	a.mu.Lock()
	if a.inflight[attemptID] {
		a.mu.Unlock()
		return errBusy
	}
	a.inflight[attemptID] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.inflight, attemptID)
		a.mu.Unlock()
	}()

	t, err := a.journal.Get(journalCtx, attemptID)
	if err != nil {
		return err
	}
	if t.Synced || !journal.Final(t.Status) {
		return nil
	}
	log := a.log.With("task_id", t.ID, "attempt_id", t.AttemptID)
	var lost error
	if t.ResultUpload && t.ResultKey == "" {
		if err := a.uploadResult(ctx, &t); err != nil {
			if !errors.Is(err, errResultLost) {
				return a.deliveryFailed(t, "upload result", err)
			}
			// Retrying cannot bring it back, and a stuck outcome would hold
			// up every later one: report the attempt failed instead.
			log.Error("result lost before upload", "err", err)
			lost = err
		}
	}
	arts, err := a.uploadArtifacts(ctx, t)
	switch {
	case err == nil:
	case rpcerr.Code(err) == rpcerr.InvalidArgument:
		// Refused for good (no object store, a path the globs do not
		// match): the outcome still counts, without the artifacts.
		log.Warn("artifacts not kept", "err", err)
		arts = nil
	default:
		return a.deliveryFailed(t, "upload artifacts", err)
	}
	req := &taskv1.CompleteTaskRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID,
		Stdout: t.Stdout, Stderr: t.Stderr, Error: truncateUTF8(t.Error, 4096),
		EndedAt: timestamppb.New(t.EndedAt), Artifacts: arts,
	}
	if t.ExitCode != nil {
		req.ExitCode = int32(*t.ExitCode)
	}
	if lost != nil {
		req.ExitCode, req.Error = -1, truncateUTF8(lost.Error(), 4096)
	}
	if t.StopReason == reasonLocalCancel && lost == nil {
		// Someone on this machine cancelled it: the task ends cancelled on
		// the server too, instead of being retried as a failure.
		req.Cancelled = true
		req.Error = "through the agent-local API of agent " + a.cfg.AgentID
	}
	if t.ResultKey != "" {
		req.ResultObject = &taskv1.ResultObject{Key: t.ResultKey, SizeBytes: t.ResultSize, Sha256: t.ResultSHA256}
	}
	cctx, cancel := a.rpcCtx(ctx)
	_, err = a.lease.CompleteTask(cctx, req)
	cancel()
	if err != nil {
		return a.deliveryFailed(t, "complete task", err)
	}
	if err := a.journal.MarkSynced(journalCtx, t.AttemptID, "", a.now()); err != nil {
		return err
	}
	log.Debug("outcome delivered", "status", t.Status)
	a.settled(t)
	return nil
}

// deliveryFailed sorts a failed delivery into "refused for good" (nil:
// marked synced with the reason) and "try again" (the error).
func (a *Agent) deliveryFailed(t journal.Task, what string, err error) error {
	switch rpcerr.Code(err) {
	case rpcerr.AttemptMismatch, rpcerr.TaskImmutable, rpcerr.LeaseExpired,
		rpcerr.TaskNotFound, rpcerr.InvalidArgument:
		note := fmt.Sprintf("%s rejected by the server: %d %s", what, rpcerr.Code(err), rpcerr.Message(err))
		a.log.Warn("outcome rejected", "task_id", t.ID, "attempt_id", t.AttemptID, "reason", note)
		if merr := a.journal.MarkSynced(journalCtx, t.AttemptID, note, a.now()); merr != nil {
			return merr
		}
		a.settled(t)
		return nil
	}
	_ = a.journal.RecordSyncFailure(journalCtx, t.AttemptID, what+": "+err.Error())
	return fmt.Errorf("%s %s: %w", what, t.AttemptID, err)
}

// uploadResult puts the result in the object store and journals the
// object, so a retried delivery does not upload it again: the rendered MP4
// of a video task, otherwise the full output as JSON.
func (a *Agent) uploadResult(ctx context.Context, t *journal.Task) error {
	if policy.NormalizeType(t.Type) == policy.TypeVideo {
		return a.uploadVideo(ctx, t)
	}
	body, err := buildResultBody(t.RunDir, t.StdoutTruncated, t.StderrTruncated)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	return a.putResult(ctx, t, "application/json", int64(len(body)), hex.EncodeToString(sum[:]),
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil })
}

// putResult asks for an upload URL, PUTs the body there and journals the
// object. open is called once, for the PUT.
func (a *Agent) putResult(ctx context.Context, t *journal.Task, contentType string, size int64, digest string, open func() (io.ReadCloser, error)) error {
	cctx, cancel := a.rpcCtx(ctx)
	up, err := a.lease.CreateResultUpload(cctx, &taskv1.CreateResultUploadRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID,
		SizeBytes: size, Sha256: digest, ContentType: contentType,
	})
	cancel()
	if err != nil {
		return err
	}
	body, err := open()
	if err != nil {
		return err
	}
	defer body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, up.GetUploadUrl(), body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", contentType)
	for k, v := range up.GetHeaders() {
		req.Header.Set(k, v)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("put result: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("put result: %s", resp.Status)
	}
	t.ResultKey, t.ResultSize, t.ResultSHA256 = up.GetObjectKey(), size, digest
	return a.journal.SetResultObject(journalCtx, t.AttemptID, t.ResultKey, t.ResultSize, t.ResultSHA256)
}
