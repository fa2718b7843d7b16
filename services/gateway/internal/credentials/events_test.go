package credentials

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
)

// storedEvent is one row of the events table, decoded.
type storedEvent struct {
	aggType, aggID, typ, tenant string
	version                     int64
	raw                         []byte
	ev                          *adminv1.AdminEvent
}

func (f fixture) adminEvents(t *testing.T) []storedEvent {
	t.Helper()
	rows, err := f.db.Query(context.Background(), `SELECT aggregate_type, aggregate_id, event_type, tenant_id, version, payload
		FROM events ORDER BY tx_id, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedEvent
	for rows.Next() {
		var e storedEvent
		if err := rows.Scan(&e.aggType, &e.aggID, &e.typ, &e.tenant, &e.version, &e.raw); err != nil {
			t.Fatal(err)
		}
		e.ev = &adminv1.AdminEvent{}
		if err := proto.Unmarshal(e.raw, e.ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every admin change appends one AdminEvent in its own transaction, with
// the actor and the address, consecutive versions per aggregate, the
// tenant it belongs to, and no secret or hash; a refused change and a
// repeated revocation append nothing.
func TestEveryAdminChangeIsAnEvent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	op := Actor{ID: "adm_op", IP: "198.51.100.9"}
	if _, err := f.store.AddTenant(ctx, TenantSpec{ID: "acme", Name: "Acme", Tier: TierStandard, Limits: Limits{RPM: 60}, By: op}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{Tier: new(TierPremium), By: op}); err != nil {
		t.Fatal(err)
	}
	key, keySecret, err := f.store.AddAPIKey(ctx, APIKeySpec{TenantID: "acme", Name: "ci", By: op})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAPIKey(ctx, "acme", key.ID, op); err != nil {
		t.Fatal(err)
	}
	admin, adminSecret, err := f.store.CreateAdminKey(ctx, "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAdminKey(ctx, admin.ID); err != nil {
		t.Fatal(err)
	}
	_, agentSecret, err := f.store.RegisterAgent(ctx, AgentSpec{AgentID: "gpu-1", TenantID: "acme", AllowedCIDRs: []string{"10.0.0.0/8"}}, op)
	if err != nil {
		t.Fatal(err)
	}
	_, rotatedSecret, err := f.store.RotateAgent(ctx, "gpu-1", nil, op)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.RecordAgentEvent(ctx, AgentEvent{Action: ActionDrained, AgentID: "gpu-1", Actor: op.ID, IP: op.IP,
		Details: map[string]string{"running_tasks": "2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.RevokeAgent(ctx, "gpu-1", "retired", op); err != nil {
		t.Fatal(err)
	}
	before := len(f.adminEvents(t))

	// Refusals and no-ops record nothing.
	if _, err := f.store.AddTenant(ctx, TenantSpec{ID: "Bad Id", Name: "x", Tier: TierStandard, By: op}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad tenant id: %v", err)
	}
	if _, err := f.store.AddTenant(ctx, TenantSpec{ID: "acme", Name: "again", Tier: TierStandard, By: op}); !errors.Is(err, ErrExists) {
		t.Errorf("tenant twice: %v", err)
	}
	if _, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{Tier: new("gold"), By: op}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad tier: %v", err)
	}
	if _, _, err := f.store.AddAPIKey(ctx, APIKeySpec{TenantID: "nobody", By: op}); !errors.Is(err, ErrNotFound) {
		t.Errorf("key of no tenant: %v", err)
	}
	if err := f.store.RevokeAPIKey(ctx, "acme", key.ID, op); err != nil {
		t.Errorf("revoke again: %v", err)
	}
	if err := f.store.RevokeAPIKey(ctx, "acme", "key_nope", op); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoke no key: %v", err)
	}
	if err := f.store.RecordAgentEvent(ctx, AgentEvent{Action: ActionRegistered, AgentID: "gpu-1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("record a registration from outside: %v", err)
	}
	if _, err := f.store.RevokeAgent(ctx, "gpu-1", "again", op); err != nil {
		t.Errorf("revoke the agent again: %v", err)
	}

	events := f.adminEvents(t)
	if len(events) != before {
		t.Errorf("%d events after refusals and repeats, %d before", len(events), before)
	}
	want := []struct{ agg, typ, tenant, actor, ip string }{
		{"tenant/acme", "TenantCreated", "acme", "adm_op", "198.51.100.9"},
		{"tenant/acme", "TenantUpdated", "acme", "adm_op", "198.51.100.9"},
		{"api-key/" + key.ID, "ApiKeyCreated", "acme", "adm_op", "198.51.100.9"},
		{"api-key/" + key.ID, "ApiKeyRevoked", "acme", "adm_op", "198.51.100.9"},
		{"admin-key/" + admin.ID, "AdminKeyCreated", "", "gateway", ""},
		{"admin-key/" + admin.ID, "AdminKeyRevoked", "", "gateway", ""},
		{"agent/gpu-1", "AgentRegistered", "acme", "adm_op", "198.51.100.9"},
		{"agent/gpu-1", "AgentTokenRotated", "acme", "adm_op", "198.51.100.9"},
		{"agent/gpu-1", "AgentDrained", "acme", "adm_op", "198.51.100.9"},
		{"agent/gpu-1", "AgentRevoked", "acme", "adm_op", "198.51.100.9"},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d", len(events), len(want))
	}
	versions := map[string]int64{}
	secrets := []string{keySecret, adminSecret, agentSecret, rotatedSecret}
	for i, w := range want {
		e := events[i]
		versions[e.aggID]++
		if e.aggID != w.agg || e.typ != w.typ || e.tenant != w.tenant || e.ev.GetTenantId() != w.tenant ||
			e.ev.GetActor() != w.actor || e.ev.GetActorIp() != w.ip || e.ev.GetAggregateId() != w.agg ||
			e.version != versions[e.aggID] || e.ev.GetVersion() != e.version || e.ev.GetEventId() == "" ||
			!e.ev.GetOccurredAt().AsTime().Equal(f.clock.Now()) {
			t.Errorf("event %d = %s %s v%d %+v; want %+v", i, e.aggID, e.typ, e.version, e.ev, w)
		}
		for _, s := range secrets {
			_, tail, _ := strings.Cut(strings.TrimPrefix(s, "tm"), "_")
			_, secret, _ := strings.Cut(tail, "_")
			if strings.Contains(string(e.raw), secret) {
				t.Errorf("event %d carries a secret", i)
			}
		}
	}
	if c := events[1].ev.GetTenantUpdated(); c.GetTier() != TierPremium || c.GetRpmLimit() != 60 || c.GetName() != "Acme" {
		t.Errorf("TenantUpdated = %+v, want the tenant after the change", c)
	}
	if c := events[2].ev.GetApiKeyCreated(); c.GetKeyId() != key.ID || c.GetPrefix() != key.Prefix || c.GetName() != "ci" {
		t.Errorf("ApiKeyCreated = %+v", c)
	}
	if c := events[6].ev.GetAgentRegistered(); len(c.GetAllowedCidrs()) != 1 || c.GetAllowedCidrs()[0] != "10.0.0.0/8" {
		t.Errorf("AgentRegistered = %+v", c)
	}
	if c := events[8].ev.GetAgentDrained(); c.GetRunningTasks() != 2 {
		t.Errorf("AgentDrained = %+v", c)
	}
	if c := events[9].ev.GetAgentRevoked(); c.GetReason() != "retired" {
		t.Errorf("AgentRevoked = %+v", c)
	}
	// The secrets' hashes are not in any event either.
	var hashes [][]byte
	rows, err := f.db.Query(ctx, `SELECT secret_hash FROM api_keys UNION ALL SELECT secret_hash FROM admin_keys
		UNION ALL SELECT secret_hash FROM agent_tokens`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	rows.Close()
	for _, e := range events {
		for _, h := range hashes {
			if strings.Contains(string(e.raw), string(h)) {
				t.Errorf("event %s %s carries a secret's hash", e.aggID, e.typ)
			}
		}
	}
}

// An agent token used from an address outside its allowed networks is
// revoked by the gateway: the event names the gateway as the actor and
// the foreign address.
func TestForeignAddressRevocationIsAnEvent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, secret, err := f.store.CreateAgentToken(ctx, "gpu-2", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret, "10.0.0.2"); err == nil {
		t.Fatal("use from a second address was accepted")
	}
	events := f.adminEvents(t)
	last := events[len(events)-1]
	if last.typ != "AgentRevoked" || last.ev.GetActor() != "gateway" || last.ev.GetActorIp() != "10.0.0.2" ||
		last.ev.GetAgentRevoked().GetBoundIp() != "10.0.0.1" || last.ev.GetAgentRevoked().GetUsedFrom() != "10.0.0.2" || last.tenant != "" {
		t.Errorf("last event = %s %+v", last.typ, last.ev)
	}
}
