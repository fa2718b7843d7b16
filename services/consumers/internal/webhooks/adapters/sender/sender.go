// Package sender posts webhook deliveries over HTTP through
// platform/safehttp: only to addresses that are public or that the
// operator allow-listed (checked on the address dialed), no redirects
// followed, a 10 s timeout, and at most 1 KiB of the receiver's answer
// kept (64 KiB read, so the connection can be reused).
package sender

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/safehttp"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/app"
)

// Limits on a receiver's answer.
const (
	keptBody = 1 << 10
	readBody = 64 << 10
)

// DefaultTimeout bounds one delivery, connection to last byte.
const DefaultTimeout = 10 * time.Second

// Sender is an app.Sender.
type Sender struct{ client *http.Client }

// New returns a sender calling what policy permits, each call within
// timeout (DefaultTimeout when 0).
func New(policy safehttp.Policy, timeout time.Duration) *Sender {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Sender{client: safehttp.NewClient(safehttp.Options{Policy: policy, Timeout: timeout})}
}

// Send implements app.Sender.
func (s *Sender) Send(ctx context.Context, url string, headers map[string]string, body []byte) app.SendResult {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return app.SendResult{Err: err, Refused: true, Duration: time.Since(start)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Taskmesh-Webhooks/1")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return app.SendResult{Err: err, Refused: errors.Is(err, safehttp.ErrRefused), Duration: time.Since(start)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, readBody))
	if len(b) > keptBody {
		b = b[:keptBody]
	}
	return app.SendResult{HTTPStatus: resp.StatusCode, Body: pg.CleanText(string(b)), Duration: time.Since(start)}
}
