package ports

import (
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestErrorsBecomeStatusesInOnePlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"attempt mismatch (30001)", fmt.Errorf("start: %w", domain.ErrAttemptMismatch), codes.Aborted, "ATTEMPT_MISMATCH"},
		{"final task (30002)", domain.ErrImmutable, codes.FailedPrecondition, "TASK_IMMUTABLE"},
		{"lease expired (30003)", domain.ErrLeaseExpired, codes.FailedPrecondition, "LEASE_EXPIRED"},
		{"not found (30004)", domain.ErrNotFound, codes.NotFound, "TASK_NOT_FOUND"},
		{"invalid field (30005)", &domain.InvalidError{Field: "priority", Reason: "out of range"}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"bad page token (30005)", app.ErrBadPageToken, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"another agent's token", app.ErrForbidden, codes.PermissionDenied, ""},
		{"store stopping", fmt.Errorf("%w: writer closed", app.ErrStopping), codes.Unavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(toStatus(slog.New(slog.DiscardHandler), tc.err))
			if st.Code() != tc.code {
				t.Errorf("code = %v, want %v (%s)", st.Code(), tc.code, st.Message())
			}
			reason := ""
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.GetReason()
				}
			}
			if reason != tc.reason {
				t.Errorf("reason = %q, want %q", reason, tc.reason)
			}
		})
	}
}
