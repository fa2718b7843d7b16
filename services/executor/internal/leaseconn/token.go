package leaseconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Token is the agent token sent on every call. Read from a file, it is read
// again when the server refuses a call as unauthenticated: an operator who
// rotates the token writes the new secret into the agent's token file, and
// the running agent carries on with it (docs/api/admin.md#agents).
type Token struct {
	file string

	mu       sync.Mutex
	secret   string
	readAt   time.Time
	minAgain time.Duration
}

// StaticToken is a token given directly (never reread).
func StaticToken(secret string) *Token { return &Token{secret: strings.TrimSpace(secret)} }

// FileToken reads the token from file now and again after a refusal.
func FileToken(file string) (*Token, error) {
	t := &Token{file: file, minAgain: time.Second}
	if _, err := t.reload(true); err != nil {
		return nil, err
	}
	return t, nil
}

// Secret returns the token to send.
func (t *Token) Secret() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.secret
}

// reload rereads the file (at most once a second unless force) and
// reports whether the secret changed.
func (t *Token) reload(force bool) (bool, error) {
	if t == nil || t.file == "" {
		return false, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !force && time.Since(t.readAt) < t.minAgain {
		return false, nil
	}
	t.readAt = time.Now()
	b, err := os.ReadFile(t.file)
	if err != nil {
		return false, fmt.Errorf("agent token file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return false, errors.New("agent token file is empty")
	}
	changed := secret != t.secret
	t.secret = secret
	return changed, nil
}

// refused rereads the token after an Unauthenticated answer and reports
// whether a retry with a new secret is worth it.
func (t *Token) refused(err error) bool {
	if status.Code(err) != codes.Unauthenticated {
		return false
	}
	changed, rerr := t.reload(false)
	return rerr == nil && changed
}

// retryUnary retries a unary call once when it was refused as
// unauthenticated and the token file now holds another secret.
func (t *Token) retryUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil && t.refused(err) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	return err
}
