package rpcerr

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func withInfo(c codes.Code, domain, code string) error {
	st, _ := status.New(c, "msg").WithDetails(&errdetails.ErrorInfo{Domain: domain, Metadata: map[string]string{"code": code}})
	return st.Err()
}

func TestCode(t *testing.T) {
	tests := []struct {
		name          string
		err           error
		wantCode      int
		wantGone      bool
		wantTransient bool
	}{
		{name: "nil", err: nil},
		{name: "lease expired is FailedPrecondition too", err: withInfo(codes.FailedPrecondition, "taskmesh", "30003"), wantCode: 30003, wantGone: true},
		{name: "task final", err: withInfo(codes.FailedPrecondition, "taskmesh", "30002"), wantCode: 30002, wantGone: true},
		{name: "attempt mismatch", err: New(AttemptMismatch, "x"), wantCode: 30001, wantGone: true},
		{name: "not found", err: New(TaskNotFound, "x"), wantCode: 30004},
		{name: "internal is retried", err: New(Internal, "x"), wantCode: 30099, wantTransient: true},
		{name: "other domain", err: withInfo(codes.FailedPrecondition, "example.com", "30003"), wantTransient: true},
		{name: "unavailable", err: status.Error(codes.Unavailable, "down"), wantTransient: true},
		{name: "plain error", err: errors.New("boom"), wantTransient: true},
		{name: "deadline", err: context.DeadlineExceeded, wantTransient: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Code(tc.err); got != tc.wantCode {
				t.Errorf("Code = %d, want %d", got, tc.wantCode)
			}
			if got := AttemptGone(tc.err); got != tc.wantGone {
				t.Errorf("AttemptGone = %v, want %v", got, tc.wantGone)
			}
			if got := Transient(tc.err); got != tc.wantTransient {
				t.Errorf("Transient = %v, want %v", got, tc.wantTransient)
			}
		})
	}
}

func TestNewUsesServerGRPCCodes(t *testing.T) {
	tests := []struct {
		code int
		want codes.Code
	}{
		{AttemptMismatch, codes.Aborted},
		{TaskImmutable, codes.FailedPrecondition},
		{LeaseExpired, codes.FailedPrecondition},
		{TaskNotFound, codes.NotFound},
		{InvalidArgument, codes.InvalidArgument},
		{Internal, codes.Internal},
	}
	for _, tc := range tests {
		err := New(tc.code, "m")
		if status.Code(err) != tc.want || Code(err) != tc.code || Message(err) != "m" {
			t.Errorf("New(%d) = %v", tc.code, err)
		}
	}
}

func TestFromGRPC(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{New(LeaseExpired, "x"), LeaseExpired},
		{status.Error(codes.InvalidArgument, "bad json"), InvalidArgument},
		{status.Error(codes.NotFound, "x"), TaskNotFound},
		{status.Error(codes.Unavailable, "x"), Internal},
	}
	for _, tc := range tests {
		if got := FromGRPC(tc.err); got != tc.want {
			t.Errorf("FromGRPC(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
