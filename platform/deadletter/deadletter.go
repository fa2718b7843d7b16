// Package deadletter serves taskmesh.deadletter.v1.DeadLetterService over
// one service's parked records (projection_dead_letters in its schema, see
// platform/projection): every service that consumes topics registers a
// Server on its internal gRPC server, and the gateway gathers them for
// operators (docs/api/admin.md#dead-letters).
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/projection"
)

// EventTypeHeader names a record's event type (written by the outbox relay).
const EventTypeHeader = "taskmesh-event-type"

// Server is one service's DeadLetterService.
type Server struct {
	deadletterv1.UnimplementedDeadLetterServiceServer
	// Service names the service in every answer (scheduler, quota,
	// consumers); a request naming another is refused.
	Service string
	// DB's search_path holds projection_dead_letters.
	DB *pgxpool.Pool
	// Wait bounds how long RetryDeadLetter waits for the consumer to try
	// the record (default 5s); after it the outcome is "pending".
	Wait time.Duration
	Log  *slog.Logger
}

// operator refuses every caller but an operator key: dead letters hold
// any tenant's events.
func operator(ctx context.Context) error {
	p, err := authn.Require(ctx)
	if err != nil {
		return err
	}
	if p.Kind != authn.KindAdmin {
		return status.Error(codes.PermissionDenied, "dead letters need an operator key (tmo_…)")
	}
	return nil
}

func (s *Server) check(ctx context.Context, service string) error {
	if err := operator(ctx); err != nil {
		return err
	}
	if service != "" && service != s.Service {
		return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT",
			fmt.Sprintf("this is the %s service's dead letter API, not %s's", s.Service, service))
	}
	return nil
}

// ListDeadLetters implements DeadLetterService.
func (s *Server) ListDeadLetters(ctx context.Context, r *deadletterv1.ListDeadLettersRequest) (*deadletterv1.ListDeadLettersResponse, error) {
	if err := s.check(ctx, r.GetService()); err != nil {
		return nil, err
	}
	var after int64
	if tok := r.GetPageToken(); tok != "" {
		n, err := strconv.ParseInt(tok, 10, 64)
		if err != nil || n < 0 {
			return nil, grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", "page_token is not one this API gave")
		}
		after = n
	}
	size := int(r.GetPageSize())
	if size == 0 {
		size = 100
	}
	list, err := projection.ListDeadLetters(ctx, s.DB, projection.DeadLetterFilter{Projection: r.GetProjection(), AfterID: after, Limit: size})
	if err != nil {
		return nil, s.status(err)
	}
	out := &deadletterv1.ListDeadLettersResponse{}
	for _, d := range list {
		out.DeadLetters = append(out.DeadLetters, s.toProto(d))
	}
	if len(list) == size {
		out.NextPageToken = strconv.FormatInt(list[len(list)-1].ID, 10)
	}
	return out, nil
}

// RetryDeadLetter implements DeadLetterService.
func (s *Server) RetryDeadLetter(ctx context.Context, r *deadletterv1.RetryDeadLetterRequest) (*deadletterv1.RetryDeadLetterResponse, error) {
	if err := s.check(ctx, r.GetService()); err != nil {
		return nil, err
	}
	requested, err := projection.RequestRetry(ctx, s.DB, r.GetId())
	if err != nil {
		return nil, s.status(err)
	}
	wait := s.Wait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		done, applied, d, err := projection.RetryOutcome(ctx, s.DB, r.GetId(), requested)
		switch {
		case err != nil:
			return nil, s.status(err)
		case applied:
			return &deadletterv1.RetryDeadLetterResponse{Outcome: "applied"}, nil
		case done:
			return &deadletterv1.RetryDeadLetterResponse{Outcome: "failed", DeadLetter: s.toProto(d)}, nil
		case time.Now().After(deadline):
			return &deadletterv1.RetryDeadLetterResponse{Outcome: "pending", DeadLetter: s.toProto(d)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, s.status(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DropDeadLetter implements DeadLetterService.
func (s *Server) DropDeadLetter(ctx context.Context, r *deadletterv1.DropDeadLetterRequest) (*deadletterv1.DropDeadLetterResponse, error) {
	if err := s.check(ctx, r.GetService()); err != nil {
		return nil, err
	}
	if err := projection.DropDeadLetter(ctx, s.DB, r.GetId()); err != nil {
		return nil, s.status(err)
	}
	if s.Log != nil {
		s.Log.Info("dead letter dropped", "service", s.Service, "dead_letter_id", r.GetId())
	}
	return &deadletterv1.DropDeadLetterResponse{}, nil
}

func (s *Server) status(err error) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return grpcserver.ToStatus(log, err, func(err error) (error, bool) {
		if errors.Is(err, projection.ErrNoDeadLetter) {
			return grpcserver.CodeStatus(codes.NotFound, deadletterv1.ErrorCode_ERROR_CODE_DEAD_LETTER_NOT_FOUND, err.Error()), true
		}
		return nil, false
	})
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func (s *Server) toProto(d projection.DeadLetter) *deadletterv1.DeadLetter {
	typ := ""
	for _, h := range d.Headers {
		if h.Key == EventTypeHeader {
			typ = strings.ToValidUTF8(string(h.Value), "\uFFFD")
		}
	}
	return &deadletterv1.DeadLetter{Service: s.Service, Id: d.ID, Projection: d.Projection, Topic: d.Topic, Partition: d.Partition,
		Offset: d.Offset, EventId: d.EventID, EventType: typ, Key: strings.ToValidUTF8(string(d.Key), "\uFFFD"), Error: d.Error, Attempts: int32(d.Attempts),
		ParkedAt: ts(d.ParkedAt), RetryRequestedAt: ts(d.RetryRequestedAt), LastRetryAt: ts(d.LastRetryAt), Payload: d.Payload}
}
