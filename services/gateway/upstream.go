package gateway

import (
	"context"

	"google.golang.org/grpc"

	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
)

// restUpstream is the REST API's connection to the scheduler: the network
// one, or a localUpstream when the scheduler runs in this process.
func (g *Gateway) restUpstream(cfg Config) grpc.ClientConnInterface {
	if cfg.SchedulerLocal == nil {
		return g.upstream
	}
	return newLocalUpstream(cfg.SchedulerLocal, g.upstream, cfg.InternalToken)
}

// localUpstream is the REST API's connection to a scheduler in this
// process (Config.SchedulerLocal): unary calls go to it in-process, through
// the same outbound interceptor as the network connection's (the call's
// metadata, the access check); streams go over the network connection,
// which carries that interceptor itself.
type localUpstream struct {
	local   grpc.ClientConnInterface
	unary   grpc.UnaryClientInterceptor
	network grpc.ClientConnInterface
}

func newLocalUpstream(local, network grpc.ClientConnInterface, internalToken string) localUpstream {
	return localUpstream{local: local, unary: outbound.UnaryInterceptor(internalToken), network: network}
}

func (u localUpstream) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return u.unary(ctx, method, args, reply, nil, func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		return u.local.Invoke(ctx, method, req, reply, opts...)
	}, opts...)
}

func (u localUpstream) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return u.network.NewStream(ctx, desc, method, opts...)
}
