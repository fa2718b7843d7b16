package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
)

// The store is never reached by these cases: the caller or the request is
// refused first, so a nil store proves nothing was changed.
func TestCheckRefusesBeforeTheStore(t *testing.T) {
	s, err := New(nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	admin := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin, Subject: "adm_1"})
	tests := []struct {
		name string
		ctx  context.Context
		req  *adminv1.CreateTenantRequest
		want codes.Code
	}{
		{"no principal", context.Background(), &adminv1.CreateTenantRequest{TenantId: "a", Name: "A", Tier: "standard"}, codes.Unauthenticated},
		{"user", authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "a"}), &adminv1.CreateTenantRequest{TenantId: "a", Name: "A", Tier: "standard"}, codes.PermissionDenied},
		{"agent", authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAgent, AgentID: "x"}), &adminv1.CreateTenantRequest{TenantId: "a", Name: "A", Tier: "standard"}, codes.PermissionDenied},
		{"invalid tier", admin, &adminv1.CreateTenantRequest{TenantId: "a", Name: "A", Tier: "gold"}, codes.InvalidArgument},
		{"invalid limit", admin, &adminv1.CreateTenantRequest{TenantId: "a", Name: "A", Tier: "standard", RpmLimit: 2_000_000_000}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.CreateTenant(tt.ctx, tt.req)
			if status.Code(err) != tt.want {
				t.Errorf("CreateTenant = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestFail(t *testing.T) {
	s, err := New(nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		err  error
		want codes.Code
		msg  string
	}{
		{fmt.Errorf("x: %w", credentials.ErrInvalid), codes.InvalidArgument, "x: invalid argument"},
		{fmt.Errorf("x: %w", credentials.ErrNotFound), codes.NotFound, "x: not found"},
		{fmt.Errorf("x: %w", credentials.ErrExists), codes.AlreadyExists, "x: already exists"},
		{context.Canceled, codes.Canceled, "request canceled"},
		{errors.New("connection reset by 10.0.0.5"), codes.Unavailable, "credential store unavailable"},
	}
	for _, tt := range tests {
		st := status.Convert(s.fail(context.Background(), tt.err))
		if st.Code() != tt.want || st.Message() != tt.msg {
			t.Errorf("fail(%v) = %s %q, want %s %q", tt.err, st.Code(), st.Message(), tt.want, tt.msg)
		}
	}
}
