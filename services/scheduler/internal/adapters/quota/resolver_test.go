package quota_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/quota"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// conn answers every call with err.
type conn struct{ err error }

func (c conn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error { return c.err }

func (conn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

// The quota service's refusal of an invalid request (an unknown queue)
// names the field it resolved by, so a caller can place it; its other
// answers pass as they are, and an unreachable service is Unavailable.
func TestResolveQueueNamesTheFieldOfAnInvalidRequest(t *testing.T) {
	unknown := status.Error(codes.InvalidArgument, `queue "nosuch": unknown queue`)
	for _, tt := range []struct {
		name, queue, quota string
		field              string
	}{
		{"a queue", "nosuch", "", "queue"},
		{"a GU quota", "", "gq", "quota"},
		{"GPU resources only", "", "", "resources"},
	} {
		r := quota.NewResolver(conn{err: unknown}, "token")
		_, err := r.ResolveQueue(context.Background(), app.Caller{Tenant: "t1"}, tt.queue, tt.quota, map[string]string{"nvidia.com/gpu": "1"})
		var ie *domain.InvalidError
		if !errors.As(err, &ie) || ie.Field != tt.field || ie.Reason != `queue "nosuch": unknown queue` {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	denied := status.Error(codes.PermissionDenied, `queue "premium" is not open to tier "standard"`)
	if _, err := quota.NewResolver(conn{err: denied}, "token").ResolveQueue(context.Background(), app.Caller{Tenant: "t1"}, "premium", "", nil); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a queue the tenant may not use: %v", err)
	}
	down := status.Error(codes.Unavailable, "connection refused")
	if _, err := quota.NewResolver(conn{err: down}, "token").ResolveQueue(context.Background(), app.Caller{Tenant: "t1"}, "q", "", nil); status.Code(err) != codes.Unavailable {
		t.Errorf("an unreachable quota service: %v", err)
	}
}
