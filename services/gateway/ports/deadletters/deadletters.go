// Package deadletters serves taskmesh.deadletter.v1.DeadLetterService to
// operators on the gateway's front door and under
// /api/v1/admin/dead-letters, gathered from every service that parks
// records (scheduler, quota, consumers): a listing walks them in that
// order, a retry or a drop goes to the service the dead letter names. Each
// call is checked here (REST reaches it without the gRPC interceptors) and
// again by the service it is forwarded to.
package deadletters

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
)

// Upstream is one service's DeadLetterService.
type Upstream struct {
	// Name is the service's name in dead letters (scheduler, quota,
	// consumers).
	Name string
	Conn grpc.ClientConnInterface
}

// Server is the gateway's DeadLetterService.
type Server struct {
	deadletterv1.UnimplementedDeadLetterServiceServer
	upstreams []Upstream
}

// New returns the service over upstreams, listed in that order.
func New(upstreams ...Upstream) *Server { return &Server{upstreams: upstreams} }

func operator(ctx context.Context) error {
	p, ok := authn.FromContext(ctx)
	if !ok {
		return grpcserver.Status(codes.Unauthenticated, 401, "UNAUTHENTICATED", "missing credentials")
	}
	if p.Kind != authn.KindAdmin {
		return grpcserver.Status(codes.PermissionDenied, 403, "PERMISSION_DENIED", "dead letters need an operator key (tmo_…)")
	}
	return nil
}

// invalid refuses a request for its field, named in the message and as
// a violation, as the protos' own rules are.
func invalid(field, msg string) error {
	msg = field + ": " + msg
	return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", msg,
		&errdetails.BadRequest_FieldViolation{Field: field, Description: msg})
}

// upstream finds the service a request names.
func (s *Server) upstream(name string) (int, error) {
	for i, u := range s.upstreams {
		if u.Name == name {
			return i, nil
		}
	}
	switch name {
	case "scheduler", "quota", "consumers":
		return 0, status.Errorf(codes.Unavailable, "the %s service is not configured on this gateway", name)
	}
	return 0, invalid("service", fmt.Sprintf("must be scheduler, quota or consumers, not %q", name))
}

func (s *Server) client(i int) deadletterv1.DeadLetterServiceClient {
	return deadletterv1.NewDeadLetterServiceClient(s.upstreams[i].Conn)
}

// ListDeadLetters implements DeadLetterService. Its page token is
// "<service index>:<that service's token>".
func (s *Server) ListDeadLetters(ctx context.Context, r *deadletterv1.ListDeadLettersRequest) (*deadletterv1.ListDeadLettersResponse, error) {
	if err := operator(ctx); err != nil {
		return nil, err
	}
	size := int(r.GetPageSize())
	if size < 0 || size > 1000 {
		return nil, invalid("page_size", "must be 0 to 1000")
	}
	if size == 0 {
		size = 100
	}
	first, last := 0, len(s.upstreams)
	if r.GetService() != "" {
		i, err := s.upstream(r.GetService())
		if err != nil {
			return nil, err
		}
		first, last = i, i+1
	}
	inner := ""
	if tok := r.GetPageToken(); tok != "" {
		idx, rest, ok := strings.Cut(tok, ":")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil || i < first || i >= last {
			return nil, invalid("page_token", "is not one this API gave")
		}
		first, inner = i, rest
	}
	out := &deadletterv1.ListDeadLettersResponse{}
	for i := first; i < last && len(out.DeadLetters) < size; i++ {
		resp, err := s.client(i).ListDeadLetters(ctx, &deadletterv1.ListDeadLettersRequest{Service: s.upstreams[i].Name,
			Projection: r.GetProjection(), PageSize: int32(size - len(out.DeadLetters)), PageToken: inner})
		if err != nil {
			return nil, err
		}
		out.DeadLetters = append(out.DeadLetters, resp.GetDeadLetters()...)
		inner = ""
		if resp.GetNextPageToken() != "" {
			out.NextPageToken = strconv.Itoa(i) + ":" + resp.GetNextPageToken()
			return out, nil
		}
		if len(out.DeadLetters) == size && i+1 < last {
			out.NextPageToken = strconv.Itoa(i+1) + ":"
		}
	}
	return out, nil
}

// RetryDeadLetter implements DeadLetterService.
func (s *Server) RetryDeadLetter(ctx context.Context, r *deadletterv1.RetryDeadLetterRequest) (*deadletterv1.RetryDeadLetterResponse, error) {
	if err := operator(ctx); err != nil {
		return nil, err
	}
	i, err := s.upstream(r.GetService())
	if err != nil {
		return nil, err
	}
	return s.client(i).RetryDeadLetter(ctx, r)
}

// DropDeadLetter implements DeadLetterService.
func (s *Server) DropDeadLetter(ctx context.Context, r *deadletterv1.DropDeadLetterRequest) (*deadletterv1.DropDeadLetterResponse, error) {
	if err := operator(ctx); err != nil {
		return nil, err
	}
	i, err := s.upstream(r.GetService())
	if err != nil {
		return nil, err
	}
	return s.client(i).DropDeadLetter(ctx, r)
}
