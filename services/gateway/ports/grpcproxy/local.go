package grpcproxy

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
)

// localRegistrar collects the unary methods of the services the gateway
// serves itself. They are dispatched by the unknown-service handler like
// proxied ones, so one path admits every call and checks every request
// message before it is decoded for a handler: grpc's own decoding would
// turn invalid UTF-8 into an Internal error.
type localRegistrar map[string]localMethod

// localMethod is one unary method and the service implementation it runs on.
type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

// RegisterService implements grpc.ServiceRegistrar. Streaming methods are
// refused at start-up: nothing needs them, and the dispatch is unary.
func (r localRegistrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	if len(sd.Streams) > 0 {
		panic(fmt.Sprintf("grpcproxy: %s has streaming methods; the gateway serves only unary ones itself", sd.ServiceName))
	}
	for _, m := range sd.Methods {
		r["/"+sd.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
}

// serviceNames lists the local services' names with extra, sorted.
func (r localRegistrar) serviceNames(extra []string) []string {
	set := map[string]bool{}
	for full := range r {
		set[serviceOf(full)] = true
	}
	for _, s := range extra {
		set[s] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// serviceOf is the service of "/pkg.Service/Method".
func serviceOf(fullMethod string) string {
	for i := len(fullMethod) - 1; i > 0; i-- {
		if fullMethod[i] == '/' {
			return fullMethod[1:i]
		}
	}
	return fullMethod
}

// serve runs a unary call: one request message, checked, decoded, handled.
func (m localMethod) serve(ctx context.Context, ss grpc.ServerStream, method string) error {
	f := &frame{}
	if err := ss.RecvMsg(f); err != nil {
		return err
	}
	if err := edge.CheckFrame(method, f.payload); err != nil {
		return err
	}
	resp, err := m.handler(m.impl, ctx, func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("grpcproxy: %s takes %T, not a proto message", method, v)
		}
		return proto.Unmarshal(f.payload, msg)
	}, nil)
	if err != nil {
		return err
	}
	return ss.SendMsg(resp)
}
