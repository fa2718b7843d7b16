package credentials

import (
	"context"
	"testing"
	"time"
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
