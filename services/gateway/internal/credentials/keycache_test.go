package credentials

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
)

// A key that authenticated is taken on trust for KeyCacheTTL: a change made
// behind this Store's back (another gateway replica revoking it) shows once
// that has passed; changes made through this Store show at once.
func TestAuthenticatedKeysAreCachedBriefly(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	key, secret, err := f.store.CreateAPIKey(ctx, "acme", "busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.store.Authenticate(ctx, secret, "192.0.2.1")
	if err != nil || p.Tier != TierStandard || p.RemoteIP != "192.0.2.1" {
		t.Fatalf("first = %+v, %v", p, err)
	}

	// Another replica revokes the key: this one trusts its cache a while.
	if _, err := f.db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, key.ID); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(KeyCacheTTL - time.Second)
	if p, err := f.store.Authenticate(ctx, secret, "192.0.2.7"); err != nil || p.RemoteIP != "192.0.2.7" || p.Subject != key.ID {
		t.Fatalf("within the cache time = %+v, %v", p, err)
	}
	f.clock.Advance(time.Second)
	assertAuthError(t, f, secret, "192.0.2.1", ErrUnauthenticated, "api key revoked")

	// Through this Store: a tier change and a revocation apply at once.
	_, secret2, err := f.store.CreateAPIKey(ctx, "acme", "second", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret2, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	premium := TierPremium
	if _, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{Tier: &premium}); err != nil {
		t.Fatal(err)
	}
	if p, err := f.store.Authenticate(ctx, secret2, "192.0.2.1"); err != nil || p.Tier != TierPremium {
		t.Fatalf("after the tier change = %+v, %v", p, err)
	}
	keys, err := f.store.ListAPIKeys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAPIKey(ctx, "acme", keys[len(keys)-1].ID, System); err != nil {
		t.Fatal(err)
	}
	assertAuthError(t, f, secret2, "192.0.2.1", ErrUnauthenticated, "api key revoked")
}

// A key expiring sooner than KeyCacheTTL is not trusted past its expiry.
func TestCachedKeyExpiresOnTime(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	expiry := f.clock.Now().Add(2 * time.Second)
	_, secret, err := f.store.CreateAPIKey(ctx, "acme", "short", &expiry)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Second)
	assertAuthError(t, f, secret, "192.0.2.1", ErrUnauthenticated, "api key expired")
}

// An agent token that authenticated from the address it is bound to is
// answered from the cache there, heartbeat or not, without the database;
// from any other address it is not.
func TestAgentTokenCachedAtItsAddress(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierPremium)
	_, secret, err := f.store.CreateAgentToken(ctx, "agent-1", "acme", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The first use binds the token, and is cached.
	if _, err := f.store.Authenticate(ctx, secret, "198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	f.db.Close()
	want := authn.Principal{Kind: authn.KindAgent, TenantID: "acme", Subject: "agent-1", AgentID: "agent-1", RemoteIP: "198.51.100.7", Tier: TierPremium}
	for _, c := range []context.Context{ctx, ForHeartbeat(ctx)} {
		for _, ip := range []string{"198.51.100.7", "::ffff:198.51.100.7"} {
			if p, err := f.store.Authenticate(c, secret, ip); err != nil || p != want {
				t.Errorf("from %s (heartbeat %v) without the database = %+v, %v; want %+v", ip, isHeartbeat(c), p, err, want)
			}
		}
	}
	// Another address, or none, needs the database: the full path decides.
	for _, ip := range []string{"198.51.100.8", ""} {
		if _, err := f.store.Authenticate(ctx, secret, ip); err == nil {
			t.Errorf("from %q without the database: accepted from the cache", ip)
		}
	}
}

// A change made behind this Store's back (another gateway replica revoking
// the token) shows once KeyCacheTTL has passed; a call from another address
// is never served from the cache, and is refused and revokes as before.
func TestCachedAgentTokenFromAnotherAddress(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok, secret, err := f.store.CreateAgentToken(ctx, "agent-1", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret, "198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	// Another replica revokes it: this one trusts its cache a while, at the
	// bound address only.
	if _, err := f.db.Exec(ctx, `UPDATE agent_tokens SET revoked_at = now(), revoked_reason = 'elsewhere' WHERE id = $1`, tok.ID); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(KeyCacheTTL - time.Second)
	if p, err := f.store.Authenticate(ForHeartbeat(ctx), secret, "198.51.100.7"); err != nil || p.AgentID != "agent-1" {
		t.Fatalf("within the cache time = %+v, %v", p, err)
	}
	assertAuthError(t, f, secret, "203.0.113.9", ErrUnauthenticated, "agent token revoked")
	f.clock.Advance(time.Second)
	assertAuthError(t, f, secret, "198.51.100.7", ErrUnauthenticated, "agent token revoked")

	// A live token, cached at its address, used from another: refused and
	// revoked at once, at its own address too.
	tok2, secret2, err := f.store.CreateAgentToken(ctx, "agent-2", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret2, "198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	assertCached(t, f, secret2, "198.51.100.7")
	assertAuthError(t, f, secret2, "203.0.113.9", ErrForbidden, "agent token used from an unexpected address; it has been revoked")
	assertAuthError(t, f, secret2, "198.51.100.7", ErrUnauthenticated, "agent token revoked")
	if got, _ := f.store.GetAgentToken(ctx, tok2.ID); got.RevokedAt == nil || !strings.Contains(got.RevokedReason, "203.0.113.9") {
		t.Errorf("after foreign use: revoked %v, reason %q", got.RevokedAt, got.RevokedReason)
	}
}

// Every change of an agent token, its agent or its tenant made through
// this Store applies to the cached token at once.
func TestCachedAgentTokenChangesApplyAtOnce(t *testing.T) {
	ctx := context.Background()
	// use registers an agent of acme and authenticates it from ip, so that
	// it is cached there.
	use := func(t *testing.T, f fixture, agent, ip string, cidrs ...string) (AgentToken, string) {
		t.Helper()
		tok, secret, err := f.store.CreateAgentToken(ctx, agent, "acme", cidrs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Authenticate(ctx, secret, ip); err != nil {
			t.Fatal(err)
		}
		assertCached(t, f, secret, ip)
		return tok, secret
	}
	newAcme := func(t *testing.T) fixture {
		f := newFixture(t)
		f.tenant(t, "acme", TierStandard)
		return f
	}
	const ip = "198.51.100.7"

	t.Run("RevokeAgent", func(t *testing.T) {
		f := newAcme(t)
		_, secret := use(t, f, "a", ip)
		if _, err := f.store.RevokeAgent(ctx, "a", "retired", System); err != nil {
			t.Fatal(err)
		}
		assertAuthError(t, f, secret, ip, ErrUnauthenticated, "agent token revoked")
	})
	t.Run("RevokeAgentToken", func(t *testing.T) {
		f := newAcme(t)
		tok, secret := use(t, f, "a", ip)
		if err := f.store.RevokeAgentToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		assertAuthError(t, f, secret, ip, ErrUnauthenticated, "agent token revoked")
	})
	t.Run("RevokedElsewhereThenHere", func(t *testing.T) {
		// Another replica revoked it first; revoking it here again keeps that
		// revocation and still forgets the cached token.
		f := newAcme(t)
		tok, secret := use(t, f, "a", ip)
		if _, err := f.db.Exec(ctx, `UPDATE agent_tokens SET revoked_at = now(), revoked_reason = 'elsewhere' WHERE id = $1`, tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.RevokeAgent(ctx, "a", "", System); err != nil {
			t.Fatal(err)
		}
		assertAuthError(t, f, secret, ip, ErrUnauthenticated, "agent token revoked")
	})
	t.Run("RotateAgent", func(t *testing.T) {
		f := newAcme(t)
		_, secret := use(t, f, "a", ip)
		_, newSecret, err := f.store.RotateAgent(ctx, "a", nil, System)
		if err != nil {
			t.Fatal(err)
		}
		assertAuthError(t, f, secret, ip, ErrUnauthenticated, "invalid agent token")
		if _, err := f.store.Authenticate(ctx, newSecret, ip); err != nil {
			t.Errorf("new secret: %v", err)
		}
	})
	t.Run("RotateAgentToken", func(t *testing.T) {
		f := newAcme(t)
		tok, secret := use(t, f, "a", ip)
		if _, _, err := f.store.RotateAgentToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		assertAuthError(t, f, secret, ip, ErrUnauthenticated, "invalid agent token")
	})
	t.Run("AddressMoved", func(t *testing.T) {
		f := newAcme(t)
		tok, secret := use(t, f, "a", "10.1.2.3", "10.1.0.0/16")
		// A call from elsewhere in the CIDRs is refused without revoking and
		// leaves the cached binding as it was.
		assertAuthError(t, f, secret, "10.1.9.9", ErrForbidden, "agent address changed: send a heartbeat from the new address first")
		assertCached(t, f, secret, "10.1.2.3")
		// The heartbeat from there moves the token: the old address is refused.
		if _, err := f.store.Authenticate(ForHeartbeat(ctx), secret, "10.1.9.9"); err != nil {
			t.Fatal(err)
		}
		assertAuthError(t, f, secret, "10.1.2.3", ErrForbidden, "agent address changed: send a heartbeat from the new address first")
		if got, _ := f.store.GetAgentToken(ctx, tok.ID); got.RevokedAt != nil || got.BoundIP != netip.MustParseAddr("10.1.9.9") {
			t.Errorf("after the move: revoked %v, bound %v", got.RevokedAt, got.BoundIP)
		}
		// And the new address is cached from its next call.
		if _, err := f.store.Authenticate(ctx, secret, "10.1.9.9"); err != nil {
			t.Fatal(err)
		}
		assertCached(t, f, secret, "10.1.9.9")
	})
	t.Run("TierChanged", func(t *testing.T) {
		f := newAcme(t)
		_, secret := use(t, f, "a", ip)
		premium := TierPremium
		if _, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{Tier: &premium}); err != nil {
			t.Fatal(err)
		}
		if p, err := f.store.Authenticate(ctx, secret, ip); err != nil || p.Tier != TierPremium {
			t.Errorf("after the tier change = %+v, %v", p, err)
		}
	})
}

// An agent token expiring sooner than KeyCacheTTL is not trusted past its
// expiry.
func TestCachedAgentTokenExpiresOnTime(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	expiry := f.clock.Now().Add(2 * time.Second)
	_, secret, err := f.store.CreateAgentToken(ctx, "short", "", nil, &expiry)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	assertCached(t, f, secret, "192.0.2.1")
	f.clock.Advance(time.Second)
	assertAuthError(t, f, secret, "192.0.2.1", ErrUnauthenticated, "agent token expired")
}

// An authentication that read the database before a change cannot put
// back what the change forgot; forgetting one agent or tenant leaves the
// others' entries.
func TestKeyCacheForgetting(t *testing.T) {
	now := time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)
	var c keyCache
	ip := netip.MustParseAddr("192.0.2.1")
	agent := func(id, tenant string) authn.Principal {
		return authn.Principal{Kind: authn.KindAgent, TenantID: tenant, Subject: id, AgentID: id}
	}
	key := func(s string) string { return agentCacheKey(hashBearer(s), ip) }

	gen := c.generation()
	c.forgetAgent("a")
	c.put(gen, key("a"), agent("a", ""), now, nil)
	if _, ok := c.get(key("a"), now); ok {
		t.Error("a put begun before a forget was kept")
	}

	gen = c.generation()
	c.put(gen, key("a"), agent("a", "acme"), now, nil)
	c.put(gen, key("b"), agent("b", "acme"), now, nil)
	c.put(gen, key("c"), agent("c", ""), now, nil)
	c.put(gen, userCacheKey(hashBearer("k")), authn.Principal{Kind: authn.KindUser, TenantID: "globex", Subject: "key_1"}, now, nil)
	c.forgetAgent("a")
	c.forgetTenant("acme")
	c.forgetAPIKey("key_2")
	for s, want := range map[string]bool{key("a"): false, key("b"): false, key("c"): true, userCacheKey(hashBearer("k")): true} {
		if _, ok := c.get(s, now); ok != want {
			t.Errorf("entry %x cached = %v, want %v", s, ok, want)
		}
	}
	c.forgetAPIKey("key_1")
	if _, ok := c.get(userCacheKey(hashBearer("k")), now); ok {
		t.Error("the API key's entry survived forgetting it")
	}
}

// assertCached fails unless the agent token's secret is cached at ip now.
func assertCached(t *testing.T, f fixture, secret, ip string) {
	t.Helper()
	if _, ok := f.store.keys.get(agentCacheKey(hashBearer(secret), netip.MustParseAddr(ip)), f.clock.Now()); !ok {
		t.Errorf("the token is not cached at %s", ip)
	}
}
