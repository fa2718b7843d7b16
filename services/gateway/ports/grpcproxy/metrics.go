package grpcproxy

import (
	"context"
	"strings"
	"sync"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// callMetrics count the front door's gRPC calls by method and status code
// and time them by method (docs/operations.md), as the REST facade's
// request metrics do for HTTP: agents and ctl speak gRPC, so a failing
// front door shows here rather than nowhere.
type callMetrics struct {
	calls    metric.Int64Counter
	duration metric.Float64Histogram
}

func newCallMetrics() callMetrics {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/services/gateway/ports/grpcproxy")
	var m callMetrics
	// Instrument errors concern invalid names only; these are constant.
	m.calls, _ = meter.Int64Counter("taskmesh.grpc.requests",
		metric.WithDescription("gRPC calls to the front door answered, by method and status code"), metric.WithUnit("{call}"))
	m.duration, _ = meter.Float64Histogram("taskmesh.grpc.request.duration",
		metric.WithDescription("time to answer a gRPC call to the front door (a long-poll claim: its wait included), by method"),
		metric.WithUnit("s"))
	return m
}

// methodUnknown labels a call of a method no service of Taskmesh has: the
// label set stays bounded whatever names clients send.
const methodUnknown = "unknown"

// knownMethods caches methodLabel's answers for the methods that exist.
var knownMethods sync.Map // full method → struct{}

// methodLabel is fullMethod ("/pkg.Service/Method") when the protobuf
// registry, which holds every service the gateway serves or proxies (their
// generated code is linked in for reflection), has that method.
func methodLabel(fullMethod string) string {
	if _, ok := knownMethods.Load(fullMethod); ok {
		return fullMethod
	}
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return methodUnknown
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return methodUnknown
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok || sd.Methods().ByName(protoreflect.Name(method)) == nil {
		return methodUnknown
	}
	knownMethods.Store(fullMethod, struct{}{})
	return fullMethod
}

// record counts one call of fullMethod that ended with code after d.
func (m callMetrics) record(ctx context.Context, fullMethod string, code codes.Code, d time.Duration) {
	method := methodLabel(fullMethod)
	m.calls.Add(ctx, 1, metric.WithAttributes(attribute.String("method", method), attribute.String("code", code.String())))
	m.duration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("method", method)))
}
