package credentials

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRegisterAgentOneActiveTokenPerAgent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierPremium)
	op := Actor{ID: "adk_op", IP: "192.0.2.100"}
	tok, secret, err := f.store.RegisterAgent(ctx, AgentSpec{AgentID: "gpu-1", TenantID: "acme", AllowedCIDRs: []string{"10.0.0.0/8"}}, op)
	if err != nil || secret == "" {
		t.Fatalf("register: %v", err)
	}
	if _, _, err := f.store.RegisterAgent(ctx, AgentSpec{AgentID: "gpu-1"}, op); !errors.Is(err, ErrExists) {
		t.Errorf("register an agent with an active token: %v, want ErrExists", err)
	}
	revoked, err := f.store.RevokeAgent(ctx, "gpu-1", "machine retired", op)
	if err != nil || revoked.RevokedAt == nil || revoked.RevokedReason != "machine retired" {
		t.Fatalf("revoke = %+v, %v", revoked, err)
	}
	again, err := f.store.RevokeAgent(ctx, "gpu-1", "again", op)
	if err != nil || !again.RevokedAt.Equal(*revoked.RevokedAt) || again.RevokedReason != "machine retired" {
		t.Errorf("second revoke = %+v, %v; want the first revocation kept", again, err)
	}
	if _, _, err := f.store.RotateAgent(ctx, "gpu-1", nil, op); !errors.Is(err, ErrRevoked) {
		t.Errorf("rotate a revoked agent: %v, want ErrRevoked", err)
	}
	// Registered again after the revocation: a new token; the agent is the
	// new one.
	f.clock.Advance(time.Minute)
	tok2, _, err := f.store.RegisterAgent(ctx, AgentSpec{AgentID: "gpu-1", TenantID: "acme"}, op)
	if err != nil || tok2.ID == tok.ID {
		t.Fatalf("register again = %+v, %v", tok2, err)
	}
	if cur, err := f.store.Agent(ctx, "gpu-1"); err != nil || cur.ID != tok2.ID || cur.RevokedAt != nil {
		t.Errorf("Agent(gpu-1) = %+v, %v; want the new token", cur, err)
	}
	if _, err := f.store.Agent(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Agent(nobody) = %v, want ErrNotFound", err)
	}
	events, err := f.store.AgentEvents(ctx, "gpu-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
		if e.Actor != "adk_op" || e.IP != "192.0.2.100" {
			t.Errorf("event %s by %s from %s, want the operator", e.Action, e.Actor, e.IP)
		}
	}
	if want := []string{ActionRegistered, ActionRevoked, ActionRegistered}; len(actions) != 3 || actions[0] != want[0] || actions[1] != want[1] || actions[2] != want[2] {
		t.Errorf("trail = %v, want %v (newest first)", actions, want)
	}
}

func TestListAgentsAndRotateAgent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierPremium)
	for _, spec := range []AgentSpec{{AgentID: "a"}, {AgentID: "b", TenantID: "acme"}, {AgentID: "c"}, {AgentID: "d", TenantID: "acme"}} {
		if _, _, err := f.store.RegisterAgent(ctx, spec, System); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.RevokeAgent(ctx, "c", "", System); err != nil {
		t.Fatal(err)
	}
	ids := func(f AgentFilter, s *Store) []string {
		t.Helper()
		got, err := s.ListAgents(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range got {
			out = append(out, a.AgentID)
		}
		return out
	}
	for _, tt := range []struct {
		filter AgentFilter
		want   string
	}{
		{AgentFilter{Limit: 10}, "[a b d]"},
		{AgentFilter{Limit: 10, IncludeRevoked: true}, "[a b c d]"},
		{AgentFilter{Limit: 10, TenantID: "acme"}, "[b d]"},
		{AgentFilter{Limit: 2, IncludeRevoked: true}, "[a b]"},
		{AgentFilter{Limit: 2, IncludeRevoked: true, After: "b"}, "[c d]"},
	} {
		if got := ids(tt.filter, f.store); fmt.Sprint(got) != tt.want {
			t.Errorf("ListAgents(%+v) = %v, want %s", tt.filter, got, tt.want)
		}
	}
	expiry := f.clock.Now().Add(48 * time.Hour)
	rotated, secret, err := f.store.RotateAgent(ctx, "a", &expiry, Actor{ID: "adk_op"})
	if err != nil || secret == "" || rotated.ExpiresAt == nil || !rotated.ExpiresAt.Equal(expiry) || rotated.RotatedAt == nil {
		t.Fatalf("rotate with a new expiry = %+v, %v", rotated, err)
	}
	past := f.clock.Now().Add(-time.Hour)
	if _, _, err := f.store.RotateAgent(ctx, "a", &past, System); !errors.Is(err, ErrInvalid) {
		t.Errorf("rotate with a past expiry: %v, want ErrInvalid", err)
	}
	if _, _, err := f.store.RotateAgent(ctx, "zzz", nil, System); !errors.Is(err, ErrNotFound) {
		t.Errorf("rotate an unknown agent: %v, want ErrNotFound", err)
	}
	if err := f.store.RecordAgentEvent(ctx, AgentEvent{Action: ActionDrained, AgentID: "a", Actor: "adk_op"}); err != nil {
		t.Fatal(err)
	}
	events, err := f.store.AgentEvents(ctx, "a", 2)
	if err != nil || len(events) != 2 || events[0].Action != ActionDrained || events[1].Action != ActionTokenRotated ||
		events[1].Details["token_id"] != rotated.ID {
		t.Errorf("a's latest events = %+v, %v", events, err)
	}
}

// Concurrent changes of one agent — rotations, drains and undrains — all
// land, each the next version of the agent's aggregate: every command
// takes the agent's lock before its first write (decision 0122).
func TestConcurrentAgentChangesAllLand(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierPremium)
	op := Actor{ID: "adk_op", IP: "192.0.2.100"}
	if _, _, err := f.store.RegisterAgent(ctx, AgentSpec{AgentID: "gpu-1", TenantID: "acme"}, op); err != nil {
		t.Fatal(err)
	}
	const n = 30
	concurrently(t, n, func(i int) error {
		switch i % 3 {
		case 0:
			_, _, err := f.store.RotateAgent(ctx, "gpu-1", nil, op)
			return err
		case 1:
			return f.store.RecordAgentEvent(ctx, AgentEvent{Action: ActionDrained, AgentID: "gpu-1", Actor: op.ID})
		default:
			return f.store.RecordAgentEvent(ctx, AgentEvent{Action: ActionUndrained, AgentID: "gpu-1", Actor: op.ID})
		}
	})
	f.wantVersions(t, "agent/gpu-1", 1+n)
	trail, err := f.store.AgentEvents(ctx, "gpu-1", 0)
	if err != nil || len(trail) != 1+n {
		t.Errorf("trail has %d entries (%v), want %d", len(trail), err, 1+n)
	}
}
