package agent

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/leaseconn"
	"google.golang.org/grpc"
)

// dial connects to the server with the agent's token: Settings.TokenFile,
// reread after a rotation, else Settings.Token.
func dial(cfg Config) (*grpc.ClientConn, error) {
	token := leaseconn.StaticToken(cfg.Token)
	if cfg.TokenFile != "" {
		var err error
		if token, err = leaseconn.FileToken(cfg.TokenFile); err != nil {
			return nil, err
		}
	}
	return leaseconn.Dial(cfg.Server, token, cfg.TLS, leaseconn.FromAddress(cfg.SourceAddr))
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
