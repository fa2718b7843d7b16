package ctl

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// businessStatus builds a status the way the scheduler does
// (platform/grpcserver.Status).
func businessStatus(c codes.Code, msg, reason, code string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Domain: "taskmesh", Reason: reason,
		Metadata: map[string]string{"code": code}})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestFormatError(t *testing.T) {
	foreignInfo, _ := status.New(codes.NotFound, "no such thing").WithDetails(&errdetails.ErrorInfo{Domain: "example.com",
		Reason: "GONE", Metadata: map[string]string{"code": "1"}})
	reasonOnly, _ := status.New(codes.FailedPrecondition, "task t1 is completed").WithDetails(&errdetails.ErrorInfo{
		Domain: "taskmesh", Reason: "TASK_IMMUTABLE"})
	codeOnly, _ := status.New(codes.Aborted, "stale attempt").WithDetails(&errdetails.ErrorInfo{
		Domain: "taskmesh", Metadata: map[string]string{"code": "30001"}})
	cmd := &cobra.Command{Use: "get"}

	tests := []struct {
		name string
		err  error
		want string
		code int
	}{
		{"business code from ErrorInfo", businessStatus(codes.NotFound, "task t1 not found", "TASK_NOT_FOUND", "30004"),
			"error: task t1 not found (code 30004 not found)", ExitError},
		{"every resource's not found", businessStatus(codes.NotFound, "template not found", "TASK_NOT_FOUND", "30004"),
			"error: template not found (code 30004 not found)", ExitError},
		{"reason without code", reasonOnly.Err(), "error: task t1 is completed (code 30002 immutable)", ExitError},
		{"code without reason", codeOnly.Err(), "error: stale attempt (code 30001 attempt mismatch)", ExitError},
		{"unauthenticated, no details", status.Error(codes.Unauthenticated, "unknown API key"),
			"error: unknown API key (code 401 unauthenticated)", ExitError},
		{"permission denied", status.Error(codes.PermissionDenied, "an agent credential cannot call this API"),
			"error: an agent credential cannot call this API (code 403 permission denied)", ExitError},
		{"unavailable", status.Error(codes.Unavailable, "cannot reach 127.0.0.1:1: connection refused"),
			"error: cannot reach 127.0.0.1:1: connection refused (code 503 unavailable)", ExitError},
		{"another domain's ErrorInfo is not ours", foreignInfo.Err(), "error: no such thing (code 404 not found)", ExitError},
		{"a business code no enum names", businessStatus(codes.NotFound, "agent nosuch not found", "NOT_FOUND", "404"),
			"error: agent nosuch not found (code 404 not found)", ExitError},
		{"multi-line validation message", businessStatus(codes.InvalidArgument, "validation error:\n - spec.name: value is required\n - spec.priority: must be <= 10", "INVALID_ARGUMENT", "30005"),
			"error: validation error: spec.name: value is required; spec.priority: must be <= 10 (code 30005 invalid argument)", ExitError},
		{"operation context kept", &opError{Op: "a.yaml:2", Err: businessStatus(codes.InvalidArgument, "name is required", "INVALID_ARGUMENT", "30005")},
			"error: a.yaml:2: name is required (code 30005 invalid argument)", ExitError},
		{"wrapped status keeps its own message", fmt.Errorf("outer: %w", status.Error(codes.Unauthenticated, "revoked")),
			"error: revoked (code 401 unauthenticated)", ExitError},
		{"task ended", &TaskEndedError{ID: "t1", Status: "failed", Reason: "exit code 3"}, "error: task t1 failed: exit code 3", ExitError},
		{"plain error", errors.New("read task file: open x.yaml: no such file or directory"),
			"error: read task file: open x.yaml: no such file or directory", ExitError},
		{"usage error", usageErrorf(cmd, "want one task id"), "error: want one task id\nRun 'get --help' for usage.", ExitUsage},
		{"wrapped usage error", fmt.Errorf("x: %w", usageErrorf(cmd, "bad")), "error: bad\nRun 'get --help' for usage.", ExitUsage},
		{"nil", nil, "", ExitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCode(tt.err); got != tt.code {
				t.Errorf("ExitCode = %d, want %d", got, tt.code)
			}
			if tt.err == nil {
				return
			}
			if got := FormatError(tt.err); got != tt.want {
				t.Errorf("FormatError =\n %q\nwant\n %q", got, tt.want)
			}
		})
	}
}

func TestWords(t *testing.T) {
	for in, want := range map[string]string{
		"TASK_NOT_FOUND": "task not found", "INTERNAL": "internal", "PermissionDenied": "permission denied",
		"Unauthenticated": "unauthenticated", "DeadlineExceeded": "deadline exceeded",
	} {
		if got := words(in); got != want {
			t.Errorf("words(%q) = %q, want %q", in, got, want)
		}
	}
}
