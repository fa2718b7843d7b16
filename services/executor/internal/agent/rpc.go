package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/taskmesh/taskmesh/platform/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// bearer sends the agent token on every call. It is the only place the
// token is used; it is never logged.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false only for plaintext loopback development
// (Config.TLS nil); with TLS configured gRPC refuses to send the token in
// the clear.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

func dial(cfg Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Trace context goes with every call (the global tracer provider;
		// a no-op until the binary sets one up).
		otel.DialOption(),
		// Reconnect quickly once the server is back: outcomes wait in the
		// journal and a long reconnect backoff would only delay them.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 3 * time.Second,
		}),
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: cfg.Token, secure: cfg.TLS != nil}))
	}
	conn, err := grpc.NewClient(cfg.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", cfg.Server, err)
	}
	return conn, nil
}

// rpcCtx bounds one server call.
func (a *Agent) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.cfg.RPCTimeout)
}

// backoffDelay grows exponentially from base to limit with ±20 % jitter.
type backoffDelay struct {
	base, limit, cur time.Duration
}

func (b *backoffDelay) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.base
	} else {
		b.cur = min(b.cur*2, b.limit)
	}
	j := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(b.cur) * j)
}

func (b *backoffDelay) reset() { b.cur = 0 }

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
