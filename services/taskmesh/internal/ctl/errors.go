package ctl

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
)

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitError = 1 // the request failed, or the task failed or was cancelled
	ExitUsage = 2 // bad flags or arguments: nothing was sent
	// ExitInterrupted is the shell's code for a command ended by SIGINT
	// (128+2): an interrupted watch is neither a failed task nor a failed
	// request.
	ExitInterrupted = 130
)

// InterruptedError is a command stopped because its context was cancelled
// (Ctrl-C, SIGTERM) before it finished.
type InterruptedError struct{ Err error }

func (e *InterruptedError) Error() string { return "interrupted" }
func (e *InterruptedError) Unwrap() error { return e.Err }

// UsageError is a mistake in the command line itself. It exits with
// ExitUsage, so scripts can tell "you called me wrong" from "the server
// said no".
type UsageError struct {
	// Command is the full command path, for the "see --help" hint.
	Command string
	Err     error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &UsageError{Command: cmd.CommandPath(), Err: fmt.Errorf(format, args...)}
}

// usageArgs wraps a cobra argument check so its failures are usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &UsageError{Command: cmd.CommandPath(), Err: err}
		}
		return nil
	}
}

// TaskEndedError reports a watched task that ended without completing.
type TaskEndedError struct {
	ID, Status, Reason string
}

func (e *TaskEndedError) Error() string {
	msg := fmt.Sprintf("task %s %s", e.ID, e.Status)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// ExitCode is the process exit code for err (ExitOK for nil).
func ExitCode(err error) int {
	var ue *UsageError
	var ie *InterruptedError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ie):
		return ExitInterrupted
	}
	return ExitError
}

// FormatError renders err as the one line the user sees:
//
//	error: task 42 not found (code 30004 not found)
//
// A gRPC status shows its business code from the google.rpc.ErrorInfo
// detail when it has one; otherwise the HTTP status the gateway would
// answer with, so the same failure reads the same over REST and gRPC.
func FormatError(err error) string {
	var ue *UsageError
	if errors.As(err, &ue) {
		return fmt.Sprintf("error: %s\nRun '%s --help' for usage.", oneLine(ue.Err.Error()), ue.Command)
	}
	var ie *InterruptedError
	if errors.As(err, &ie) {
		return "interrupted"
	}
	st, ok := grpcStatus(err)
	if !ok {
		return "error: " + oneLine(err.Error())
	}
	msg := st.Message()
	var done string
	var oe *opError
	if errors.As(err, &oe) {
		msg = oe.Op + ": " + msg
		if oe.Done != "" {
			done = "; " + oe.Done
		}
	}
	code, meaning := statusCode(st)
	return fmt.Sprintf("error: %s (code %d %s)%s", oneLine(msg), code, meaning, oneLine(done))
}

// opError says what a failed request was about (e.g. which file's task)
// without burying the server's status under gRPC's "rpc error: code = …"
// text, which wrapping with fmt.Errorf would show.
type opError struct {
	Op  string
	Err error
	// Done, when set, says what earlier requests of the same command
	// already did (the tasks a file created before one was refused), so
	// the user can tell what a rerun would repeat.
	Done string
}

func (e *opError) Error() string {
	if e.Done != "" {
		return e.Op + ": " + e.Err.Error() + "; " + e.Done
	}
	return e.Op + ": " + e.Err.Error()
}
func (e *opError) Unwrap() error { return e.Err }

// grpcStatus finds a gRPC status inside err. status.FromError would
// replace the message with the whole wrapped text, "rpc error: code = …"
// included; the status's own message is what the user should read.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus(), true
	}
	return nil, false
}

// sharedMeaning words the codes every resource answers with, whose enum
// names say "task": a template, group or service not found is 30004 too,
// and "(code 30004 task not found)" after "template not found" misleads.
var sharedMeaning = map[int]string{
	int(taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND): "not found",
	int(taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE): "immutable",
}

// statusCode returns the number and words shown in parentheses.
func statusCode(st *status.Status) (int, string) {
	code := grpcserver.Code(st.Err())
	if code == 0 {
		// A server that names the reason but not the number.
		if info := grpcserver.Info(st.Err()); info != nil {
			code = int(taskv1.ErrorCode_value["ERROR_CODE_"+info.GetReason()])
		}
	}
	if code != 0 {
		if meaning, shared := sharedMeaning[code]; shared {
			return code, meaning
		}
		if name, known := taskv1.ErrorCode_name[int32(code)]; known {
			return code, words(strings.TrimPrefix(name, "ERROR_CODE_"))
		}
		if name, known := quotav1.ErrorCode_name[int32(code)]; known { // the quota service's codes
			return code, words(strings.TrimPrefix(name, "ERROR_CODE_"))
		}
		// A code neither enum names (an HTTP-style 404 of the admin
		// API, say): the gRPC code says what it means.
		return code, words(st.Code().String())
	}
	return httpStatus(st.Code()), words(st.Code().String())
}

// httpStatus is grpc-gateway's mapping of gRPC codes to HTTP statuses.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// words turns TASK_NOT_FOUND or PermissionDenied into "task not found" or
// "permission denied".
func words(s string) string {
	if strings.Contains(s, "_") || strings.ToUpper(s) == s {
		return strings.ToLower(strings.ReplaceAll(s, "_", " "))
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// oneLine keeps multi-line messages on the single error line. Validation
// reports list one violation per line ("validation error:\n - a: …\n - b:
// …"); they become "validation error: a: …; b: …".
func oneLine(s string) string {
	var b strings.Builder
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(strings.TrimPrefix(l, "- "))
		if l == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}
