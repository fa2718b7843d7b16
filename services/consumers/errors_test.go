package consumers_test

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/consumers"
)

// Every refusal of the service's APIs, sent as a caller would send it:
// the documented status and business code, and nothing changed. Another
// tenant's data is invisible: its deliveries are not found, its audit
// entries and usage are not listed.
func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t)
	s := e.start(consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if _, err := s.hooks().SetWebhookEndpoint(tenantKey("globex"), &webhookv1.SetWebhookEndpointRequest{Url: rcv.URL + "/globex"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	sc := newScript(t)
	sc.add("globex", "task-g", now, submitted(&taskv1.TaskSpec{Name: "globex's"}))
	sc.add("globex", "task-g", now, started("a"))
	sc.add("globex", "task-g", now.Add(time.Second), succeeded("a"))
	e.produce(sc.records)
	eventually(t, "globex's notification", func() bool { return len(rcv.at("/globex")) == 1 })
	eventually(t, "globex's audit entries", func() bool {
		return len(listAudit(t, s, tenantKey("globex"), &auditv1.ListAuditLogsRequest{ResourceId: "task-g"})) == 3
	})
	theirs, err := s.hooks().ListWebhookDeliveries(tenantKey("globex"), &webhookv1.ListWebhookDeliveriesRequest{})
	if err != nil || len(theirs.GetDeliveries()) != 1 {
		t.Fatalf("globex's deliveries = %v, %v", theirs, err)
	}
	id := theirs.GetDeliveries()[0].GetId()
	agent := as(authn.Principal{Kind: authn.KindAgent, Subject: "agent-1", AgentID: "agent-1"})

	refusals := []struct {
		name string
		call func() error
		code codes.Code
		biz  int // 0: not checked
	}{
		{"deliveries: unknown state", func() error {
			_, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{State: "lost"})
			return err
		}, codes.InvalidArgument, 30005},
		{"deliveries: page size", func() error {
			_, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{PageSize: 5000})
			return err
		}, codes.InvalidArgument, 30005},
		{"deliveries: page token", func() error {
			_, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{PageToken: "made-up"})
			return err
		}, codes.InvalidArgument, 30005},
		{"deliveries: another tenant's list", func() error {
			_, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{TenantId: "globex"})
			return err
		}, codes.InvalidArgument, 30005},
		{"delivery: another tenant's", func() error {
			_, err := s.hooks().GetWebhookDelivery(tenantKey("acme"), &webhookv1.GetWebhookDeliveryRequest{DeliveryId: id})
			return err
		}, codes.NotFound, 32004},
		{"redeliver: another tenant's", func() error {
			_, err := s.hooks().RedeliverWebhook(tenantKey("acme"), &webhookv1.RedeliverWebhookRequest{DeliveryId: id})
			return err
		}, codes.NotFound, 32004},
		{"redeliver: unknown", func() error {
			_, err := s.hooks().RedeliverWebhook(operator, &webhookv1.RedeliverWebhookRequest{DeliveryId: "msg_nothing"})
			return err
		}, codes.NotFound, 32004},
		{"endpoint: not a URL", func() error {
			_, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: "https://user:pw@example.com/"})
			return err
		}, codes.InvalidArgument, 30005},
		{"endpoint: a numeric host that is no dotted IPv4 address", func() error {
			_, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: "http://167772161/hook"})
			return err
		}, codes.InvalidArgument, 30005},
		{"endpoint: an operator key", func() error {
			_, err := s.hooks().SetWebhookEndpoint(operator, &webhookv1.SetWebhookEndpointRequest{Url: "https://example.com/"})
			return err
		}, codes.PermissionDenied, 0},
		{"endpoint: an agent token", func() error {
			_, err := s.hooks().GetWebhookEndpoint(agent, &webhookv1.GetWebhookEndpointRequest{})
			return err
		}, codes.PermissionDenied, 0},
		{"usage: grouping", func() error {
			_, err := s.usage().GetUsage(tenantKey("acme"), &usagev1.GetUsageRequest{GroupBy: "hour"})
			return err
		}, codes.InvalidArgument, 30005},
		{"usage: to", func() error {
			_, err := s.usage().GetUsage(tenantKey("acme"), &usagev1.GetUsageRequest{To: "tomorrow"})
			return err
		}, codes.InvalidArgument, 30005},
		{"usage: from after to", func() error {
			_, err := s.usage().GetUsage(tenantKey("acme"), &usagev1.GetUsageRequest{From: "2026-11-02", To: "2026-11-01"})
			return err
		}, codes.InvalidArgument, 30005},
		{"usage: an agent token", func() error {
			_, err := s.usage().GetUsage(agent, &usagev1.GetUsageRequest{})
			return err
		}, codes.PermissionDenied, 0},
		{"audit: page token", func() error {
			_, err := s.audit().ListAuditLogs(tenantKey("acme"), &auditv1.ListAuditLogsRequest{PageToken: "made-up"})
			return err
		}, codes.InvalidArgument, 30005},
		{"audit: another tenant's", func() error {
			_, err := s.audit().ListAuditLogs(tenantKey("acme"), &auditv1.ListAuditLogsRequest{TenantId: "globex"})
			return err
		}, codes.InvalidArgument, 30005},
	}
	for _, r := range refusals {
		err := r.call()
		if status.Code(err) != r.code || r.biz != 0 && grpcserver.Code(err) != r.biz {
			t.Errorf("%s: %v (code %d), want %s %d", r.name, err, grpcserver.Code(err), r.code, r.biz)
		}
	}

	// Nothing changed: acme has no endpoint, globex's delivery was not
	// sent again, and acme sees none of globex's audit entries or usage.
	if ep, err := s.hooks().GetWebhookEndpoint(tenantKey("acme"), &webhookv1.GetWebhookEndpointRequest{}); err != nil || ep.GetEndpoint().GetUrl() != "" {
		t.Errorf("acme's endpoint = %v, %v", ep, err)
	}
	if got, err := s.hooks().GetWebhookDelivery(tenantKey("globex"), &webhookv1.GetWebhookDeliveryRequest{DeliveryId: id}); err != nil ||
		got.GetDelivery().GetAttempts() != 1 || got.GetDelivery().GetState() != "delivered" {
		t.Errorf("globex's delivery = %v, %v", got, err)
	}
	if mine := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{ResourceId: "task-g"}); len(mine) != 0 {
		t.Errorf("acme sees globex's audit entries: %v", mine)
	}
	if mine, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{}); err != nil || len(mine.GetDeliveries()) != 0 {
		t.Errorf("acme's deliveries = %v, %v", mine, err)
	}
	eventually(t, "globex's usage", func() bool {
		u, err := s.usage().GetUsage(tenantKey("globex"), &usagev1.GetUsageRequest{GroupBy: "tenant"})
		return err == nil && len(u.GetRows()) == 1
	})
	if u, err := s.usage().GetUsage(tenantKey("acme"), &usagev1.GetUsageRequest{GroupBy: "tenant"}); err != nil || len(u.GetRows()) != 0 {
		t.Errorf("acme's usage = %v, %v", u, err)
	}
}
