package grpcserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testCode stands in for a generated error enum.
type testCode int32

func (c testCode) String() string { return map[testCode]string{30004: "ERROR_CODE_TASK_NOT_FOUND"}[c] }

var errKnown = errors.New("no such thing")

func TestToStatus(t *testing.T) {
	dependency := status.Error(codes.FailedPrecondition, "GU quota is being created")
	service := func(err error) (error, bool) {
		if errors.Is(err, errKnown) {
			return CodeStatus(codes.NotFound, testCode(30004), err.Error()), true
		}
		return nil, false
	}
	tests := []struct {
		name       string
		err        error
		want       codes.Code
		wantReason string
		wantMsg    string
	}{
		{"a dependency's status passes through", dependency, codes.FailedPrecondition, "", "GU quota is being created"},
		{"the service's own errors", fmt.Errorf("get: %w", errKnown), codes.NotFound, "TASK_NOT_FOUND", "get: no such thing"},
		{"cancelled", fmt.Errorf("query: %w", context.Canceled), codes.Canceled, "", "request cancelled"},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "", "deadline exceeded"},
		{"a database connection that broke is unavailable", fmt.Errorf("pg: begin: %w", &pgconn.ConnectError{Config: &pgconn.Config{}}),
			codes.Unavailable, "", "service unavailable: the database cannot be reached; retry later"},
		{"a database shutting down is unavailable", fmt.Errorf("write: %w", &pgconn.PgError{Code: "57P01"}),
			codes.Unavailable, "", "service unavailable: the database cannot be reached; retry later"},
		{"a change that lost to concurrent ones is unavailable, saying so", fmt.Errorf("append: %w", &pgconn.PgError{Code: "40001"}),
			codes.Unavailable, "", "service unavailable: concurrent changes of the same data; retry"},
		{"a deadlock too", fmt.Errorf("write: %w", &pgconn.PgError{Code: "40P01"}),
			codes.Unavailable, "", "service unavailable: concurrent changes of the same data; retry"},
		{"a constraint is still internal", fmt.Errorf("write: %w", &pgconn.PgError{Code: "23502"}), codes.Internal, "INTERNAL", "internal error"},
		{"anything else is internal, without its text", errors.New("password=hunter2 leaked"), codes.Internal, "INTERNAL", "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			st := status.Convert(ToStatus(slog.New(slog.NewTextHandler(&logs, nil)), tt.err, service))
			if st.Code() != tt.want || st.Message() != tt.wantMsg {
				t.Fatalf("status = %v %q, want %v %q", st.Code(), st.Message(), tt.want, tt.wantMsg)
			}
			var reason string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.GetReason()
				}
			}
			if reason != tt.wantReason {
				t.Errorf("reason = %q, want %q", reason, tt.wantReason)
			}
			if internal := tt.want == codes.Internal; internal != strings.Contains(logs.String(), "internal error") {
				t.Errorf("logged = %q (only unknown errors are logged)", logs.String())
			}
		})
	}
	if err := ToStatus(slog.Default(), nil, service); err != nil {
		t.Errorf("ToStatus(nil) = %v", err)
	}
}

// TestADatabaseOutageIsOneWarningPerWindow: every call that meets the
// outage is answered Unavailable, and the service's log gets one warning
// for the window (package logthrottle), not one per call. An internal
// error is logged each time.
func TestADatabaseOutageIsOneWarningPerWindow(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	none := func(error) (error, bool) { return nil, false }
	for range 20 {
		err := ToStatus(log, fmt.Errorf("pg: begin: %w", &pgconn.ConnectError{Config: &pgconn.Config{}}), none)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("ToStatus during the outage = %v, want Unavailable", err)
		}
	}
	for range 3 {
		ToStatus(log, errors.New("boom"), none)
	}
	if n := strings.Count(logs.String(), `msg="database unavailable"`); n != 1 {
		t.Errorf("%d database unavailable lines for 20 calls, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `msg="internal error"`); n != 3 {
		t.Errorf("%d internal error lines for 3 internal errors, want 3", n)
	}
}
