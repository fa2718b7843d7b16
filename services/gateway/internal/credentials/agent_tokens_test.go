package credentials

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
)

func TestAgentTokenBindsToFirstAddress(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierPremium)
	tok, secret, err := f.store.CreateAgentToken(ctx, "agent-001", "acme", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "tma_"+tok.Prefix+"_") || len(secret) != 4+8+1+43 {
		t.Fatalf("secret has the wrong shape (len %d)", len(secret))
	}

	p, err := f.store.Authenticate(ctx, secret, "198.51.100.7")
	if err != nil {
		t.Fatalf("first use: %v", err)
	}
	want := authn.Principal{Kind: authn.KindAgent, TenantID: "acme", Subject: "agent-001", AgentID: "agent-001", RemoteIP: "198.51.100.7", Tier: TierPremium}
	if p != want {
		t.Errorf("principal = %+v, want %+v", p, want)
	}
	// The same address again, also in IPv4-mapped form, is the same caller.
	for _, ip := range []string{"198.51.100.7", "::ffff:198.51.100.7"} {
		if _, err := f.store.Authenticate(ctx, secret, ip); err != nil {
			t.Errorf("use from %s: %v", ip, err)
		}
	}
	got, err := f.store.GetAgentToken(ctx, tok.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.BoundIP != netip.MustParseAddr("198.51.100.7") {
		t.Errorf("BoundIP = %v, want 198.51.100.7", got.BoundIP)
	}

	// Another address: refused, and the token is revoked for everyone.
	assertAuthError(t, f, secret, "203.0.113.50", ErrForbidden, "agent token used from an unexpected address; it has been revoked")
	assertAuthError(t, f, secret, "198.51.100.7", ErrUnauthenticated, "agent token revoked")
	got, _ = f.store.GetAgentToken(ctx, tok.ID)
	if got.RevokedAt == nil || !strings.Contains(got.RevokedReason, "203.0.113.50") {
		t.Errorf("after foreign use: RevokedAt %v, reason %q", got.RevokedAt, got.RevokedReason)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "agent token revoked") || !strings.Contains(logs, tok.ID) || !strings.Contains(logs, "remote_ip=203.0.113.50") {
		t.Errorf("no clear log line for the revocation:\n%s", logs)
	}
	assertNoSecret(t, logs, secret)
	// And the audit trail shows it: who (the gateway), from where, why.
	events, err := f.store.AgentEvents(ctx, "agent-001", 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("events = %v, %v", events, err)
	}
	if e := events[0]; e.Action != ActionRevoked || e.Actor != "gateway" || e.IP != "203.0.113.50" ||
		e.Details["token_id"] != tok.ID || e.Details["bound_ip"] != "198.51.100.7" || !strings.Contains(e.Details["reason"], "bound to 198.51.100.7") {
		t.Errorf("revocation event = %+v", e)
	}

	// A revoked token cannot be rotated back to life.
	if _, _, err := f.store.RotateAgentToken(ctx, tok.ID); !errors.Is(err, ErrRevoked) {
		t.Errorf("RotateAgentToken(revoked) error = %v, want ErrRevoked", err)
	}
}

func TestAgentTokenAllowedCIDRs(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A shared-pool agent: no tenant, no tier.
	tok, secret, err := f.store.CreateAgentToken(ctx, "pool-7", "", []string{"10.1.0.0/16", "192.0.2.9", "2001:db8::/32"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCIDRs := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.9/32"), netip.MustParsePrefix("2001:db8::/32")}
	if got, _ := f.store.GetAgentToken(ctx, tok.ID); len(got.AllowedCIDRs) != 3 || got.AllowedCIDRs[0] != wantCIDRs[0] || got.AllowedCIDRs[1] != wantCIDRs[1] || got.AllowedCIDRs[2] != wantCIDRs[2] {
		t.Errorf("AllowedCIDRs = %v, want %v", got.AllowedCIDRs, wantCIDRs)
	}
	heartbeat := ForHeartbeat(ctx)
	// Each step: a call from ip, a heartbeat or not; the answer; where the
	// token is bound after.
	tests := []struct {
		ip        string
		heartbeat bool
		wantKind  error
		wantBound string
	}{
		{ip: "10.1.2.3", wantBound: "10.1.2.3"}, // the first use binds, heartbeat or not
		{ip: "10.1.2.3", heartbeat: true, wantBound: "10.1.2.3"},
		// Another address inside the list: refused, not revoked, until a
		// heartbeat from there moves the token.
		{ip: "10.1.255.254", wantKind: ErrForbidden, wantBound: "10.1.2.3"},
		{ip: "10.1.255.254", heartbeat: true, wantBound: "10.1.255.254"},
		{ip: "10.1.255.254", wantBound: "10.1.255.254"},
		{ip: "10.1.2.3", wantKind: ErrForbidden, wantBound: "10.1.255.254"},
		{ip: "2001:db8::1", heartbeat: true, wantBound: "2001:db8::1"},
		{ip: "192.0.2.9", heartbeat: true, wantBound: "192.0.2.9"},
		// No address at all cannot be checked: refused, nothing changes.
		{ip: "", heartbeat: true, wantKind: ErrForbidden, wantBound: "192.0.2.9"},
		{ip: "not-an-ip", wantKind: ErrForbidden, wantBound: "192.0.2.9"},
	}
	for i, tt := range tests {
		c := ctx
		if tt.heartbeat {
			c = heartbeat
		}
		p, err := f.store.Authenticate(c, secret, tt.ip)
		if !errors.Is(err, tt.wantKind) || (tt.wantKind == nil) != (err == nil) {
			t.Errorf("step %d: from %q (heartbeat %v): error = %v, want %v", i, tt.ip, tt.heartbeat, err, tt.wantKind)
			continue
		}
		if err == nil && (p.TenantID != "" || p.AgentID != "pool-7" || p.Tier != "" || p.RemoteIP != tt.ip) {
			t.Errorf("step %d: from %q: principal %+v", i, tt.ip, p)
		}
		if got, _ := f.store.GetAgentToken(ctx, tok.ID); got.RevokedAt != nil || got.BoundIP != netip.MustParseAddr(tt.wantBound) {
			t.Errorf("step %d: revoked %v, bound %v; want bound to %s", i, got.RevokedAt, got.BoundIP, tt.wantBound)
		}
	}
	// Outside the list, even on a heartbeat: refused and revoked.
	if _, err := f.store.Authenticate(heartbeat, secret, "10.2.0.1"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("heartbeat from outside the list: %v", err)
	}
	assertAuthError(t, f, secret, "192.0.2.9", ErrUnauthenticated, "agent token revoked")
	events, err := f.store.AgentEvents(ctx, "pool-7", 0)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action+"@"+e.IP)
	}
	want := "[agent.revoked@10.2.0.1 agent.address_changed@192.0.2.9 agent.address_changed@2001:db8::1 agent.address_changed@10.1.255.254 agent.registered@]"
	if got := fmt.Sprint(actions); got != want {
		t.Errorf("audit trail = %s, want %s", got, want)
	}
	if e := events[1]; e.Details["from"] != "2001:db8::1" || e.Details["to"] != "192.0.2.9" || e.Actor != "gateway" {
		t.Errorf("address change = %+v", e)
	}
	if e := events[0]; !strings.Contains(e.Details["reason"], "outside its allowed CIDRs") || e.Details["bound_ip"] != "192.0.2.9" {
		t.Errorf("revocation = %+v", e)
	}
}

func TestAgentTokenRotation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	tok, oldSecret, err := f.store.CreateAgentToken(ctx, "agent-1", "acme", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, oldSecret, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour)
	rotated, newSecret, err := f.store.RotateAgentToken(ctx, tok.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.ID != tok.ID || rotated.Prefix == tok.Prefix || newSecret == oldSecret || rotated.RotatedAt == nil || rotated.BoundIP.IsValid() {
		t.Errorf("rotated = %+v", rotated)
	}
	assertAuthError(t, f, oldSecret, "192.0.2.1", ErrUnauthenticated, "invalid agent token")
	// The new secret binds afresh (the agent may have moved).
	if _, err := f.store.Authenticate(ctx, newSecret, "192.0.2.77"); err != nil {
		t.Errorf("new secret: %v", err)
	}
	if _, _, err := f.store.RotateAgentToken(ctx, "atk_nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RotateAgentToken(unknown) error = %v, want ErrNotFound", err)
	}
	logs := f.logs.String()
	assertNoSecret(t, logs, oldSecret)
	assertNoSecret(t, logs, newSecret)
}

func TestAgentTokenExpiryAndRevocation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	expiry := f.clock.Now().Add(time.Hour)
	expiring, expSecret, err := f.store.CreateAgentToken(ctx, "a-exp", "", nil, &expiry)
	if err != nil {
		t.Fatal(err)
	}
	revoked, revSecret, err := f.store.CreateAgentToken(ctx, "a-rev", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAgentToken(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAgentToken(ctx, revoked.ID); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	if err := f.store.RevokeAgentToken(ctx, "atk_nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeAgentToken(unknown) = %v, want ErrNotFound", err)
	}
	assertAuthError(t, f, revSecret, "192.0.2.1", ErrUnauthenticated, "agent token revoked")
	if _, err := f.store.Authenticate(ctx, expSecret, "192.0.2.1"); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	f.clock.Advance(time.Hour)
	assertAuthError(t, f, expSecret, "192.0.2.1", ErrUnauthenticated, "agent token expired")
	if got, _ := f.store.GetAgentToken(ctx, expiring.ID); got.ExpiresAt == nil || !got.ExpiresAt.Equal(expiry) {
		t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, expiry)
	}
}

func TestCreateAgentTokenErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	past := f.clock.Now().Add(-time.Minute)
	tests := []struct {
		name, agent, tenant string
		cidrs               []string
		expiry              *time.Time
		wantErr             error
	}{
		{name: "no agent id", agent: "", wantErr: ErrInvalid},
		{name: "long agent id", agent: strings.Repeat("a", 129), wantErr: ErrInvalid},
		{name: "bad cidr", agent: "a", cidrs: []string{"10.0.0.0/33"}, wantErr: ErrInvalid},
		{name: "not an address", agent: "a", cidrs: []string{"example.com"}, wantErr: ErrInvalid},
		{name: "past expiry", agent: "a", expiry: &past, wantErr: ErrInvalid},
		{name: "no such tenant", agent: "a", tenant: "nobody", wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		if _, _, err := f.store.CreateAgentToken(ctx, tt.agent, tt.tenant, tt.cidrs, tt.expiry); !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: error = %v, want %v", tt.name, err, tt.wantErr)
		}
	}
}

// TestAgentTokenFirstUseRace: two first uses from different addresses at
// once; exactly one binds, the other is refused and revokes the token.
func TestAgentTokenFirstUseRace(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for round := range 5 {
		_, secret, err := f.store.CreateAgentToken(ctx, "racer", "", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, ip := range []string{"192.0.2.1", "192.0.2.2"} {
			wg.Go(func() { _, errs[i] = f.store.Authenticate(ctx, secret, ip) })
		}
		wg.Wait()
		ok, forbiddenN := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrForbidden):
				forbiddenN++
			default:
				t.Errorf("round %d: unexpected error %v", round, err)
			}
		}
		if ok != 1 || forbiddenN != 1 {
			t.Errorf("round %d: %d accepted, %d refused; want 1 and 1", round, ok, forbiddenN)
		}
	}
}

func assertNoSecret(t *testing.T, logs, secret string) {
	t.Helper()
	// The random part alone is as good as the whole string to an attacker.
	if strings.Contains(logs, secret) || strings.Contains(logs, secret[len(secret)-secretLen:]) {
		t.Errorf("a secret appears in the logs")
	}
}
