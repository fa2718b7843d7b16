// Package resultupload puts a task's result object into the object store
// the way the agent protocol prescribes (docs/api/tasks.md#agent-protocol):
// CreateResultUpload for a presigned PUT bound to the body's exact size,
// SHA-256 and content type, the PUT itself, and the reference that
// CompleteTask then names. Backends that delegate work to another engine
// (Slurm, Kubernetes) use it for results they collect afterwards; the
// executor never holds object-store credentials.
package resultupload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// Attempt names the attempt the result belongs to.
type Attempt struct {
	TaskID, AgentID, AttemptID string
}

// Body is a result to upload: its size and SHA-256 must be known before
// the upload URL is asked for, so Open may be called more than once.
type Body struct {
	Size        int64
	SHA256      string // hex
	ContentType string
	Open        func() (io.ReadCloser, error)
}

// Bytes is a Body held in memory.
func Bytes(b []byte, contentType string) Body {
	sum := sha256.Sum256(b)
	return Body{
		Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), ContentType: contentType,
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
	}
}

// File is a Body read from a file (hashed once here).
func File(path, contentType string) (Body, error) {
	f, err := os.Open(path)
	if err != nil {
		return Body{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Body{}, err
	}
	return Body{
		Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), ContentType: contentType,
		Open: func() (io.ReadCloser, error) { return os.Open(path) },
	}, nil
}

// Upload asks for an upload URL, PUTs the body and returns the reference
// for CompleteTask.result_object. rpcTimeout bounds the lease call; the
// PUT is bounded by client's own timeout.
func Upload(ctx context.Context, lease taskv1.LeaseServiceClient, client *http.Client, a Attempt, b Body, rpcTimeout time.Duration) (*taskv1.ResultObject, error) {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	up, err := lease.CreateResultUpload(cctx, &taskv1.CreateResultUploadRequest{
		TaskId: a.TaskID, AgentId: a.AgentID, AttemptId: a.AttemptID,
		SizeBytes: b.Size, Sha256: b.SHA256, ContentType: b.ContentType,
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("create result upload: %w", err)
	}
	body, err := b.Open()
	if err != nil {
		return nil, err
	}
	defer body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, up.GetUploadUrl(), body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = b.Size
	req.Header.Set("Content-Type", b.ContentType)
	for k, v := range up.GetHeaders() {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("put result: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("put result: %s", resp.Status)
	}
	return &taskv1.ResultObject{Key: up.GetObjectKey(), SizeBytes: b.Size, Sha256: b.SHA256}, nil
}
