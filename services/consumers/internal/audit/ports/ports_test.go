package ports

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

type store struct{ q domain.Query }

func (s *store) List(_ context.Context, q domain.Query) ([]domain.Entry, error) {
	s.q = q
	return []domain.Entry{{ID: "ev-1", Action: "task.created", Resource: "task", ResourceID: "t", IP: "192.0.2.1", Details: "{}"}}, nil
}

func TestListAuditLogs(t *testing.T) {
	st := &store{}
	s := &Server{App: app.New(app.Config{Store: st}), Log: slog.New(slog.DiscardHandler)}
	user := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "acme"})
	resp, err := s.ListAuditLogs(user, &auditv1.ListAuditLogsRequest{Resource: "task", Action: "created"})
	if err != nil || len(resp.GetAuditLogs()) != 1 || resp.GetAuditLogs()[0].GetIp() != "192.0.2.1" || st.q.Tenant != "acme" || st.q.Action != "task.created" {
		t.Fatalf("list = %v, %v (query %+v)", resp, err, st.q)
	}
	_, err = s.ListAuditLogs(user, &auditv1.ListAuditLogsRequest{From: "last week"})
	if status.Code(err) != codes.InvalidArgument || grpcserver.Code(err) != 30005 {
		t.Errorf("a bad date: %v", err)
	}
	agent := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAgent, AgentID: "a"})
	if _, err := s.ListAuditLogs(agent, &auditv1.ListAuditLogsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an agent: %v", err)
	}
	op := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin})
	if _, err := s.ListAuditLogs(op, &auditv1.ListAuditLogsRequest{TenantId: "globex"}); err != nil || st.q.Tenant != "globex" {
		t.Errorf("operator: %v, query %+v", err, st.q)
	}
}
