package credentials

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
)

func TestAPIKeyLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierPremium)
	f.tenant(t, "globex", TierStandard)

	expiry := f.clock.Now().Add(time.Hour)
	key, secret, err := f.store.CreateAPIKey(ctx, "acme", "ci", &expiry)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "tm_"+key.Prefix+"_") || len(secret) != 3+8+1+43 {
		t.Fatalf("secret has the wrong shape (len %d, prefix %q)", len(secret), key.Prefix)
	}

	p, err := f.store.Authenticate(ctx, secret, "203.0.113.9")
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	want := authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: key.ID, RemoteIP: "203.0.113.9", Tier: TierPremium}
	if p != want {
		t.Errorf("principal = %+v, want %+v", p, want)
	}

	// Only the hash is stored: neither the secret nor its random part
	// appears in the table.
	var stored []byte
	var prefix string
	if err := f.db.QueryRow(ctx, `SELECT secret_hash, prefix FROM api_keys WHERE id = $1`, key.ID).Scan(&stored, &prefix); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, hashBearer(secret)) || bytes.Contains(stored, []byte(secret[12:])) || prefix != key.Prefix {
		t.Error("stored row is not (prefix, sha256(secret))")
	}

	// Another key of another tenant does not interfere; listing is per
	// tenant and never shows secrets.
	if _, _, err := f.store.CreateAPIKey(ctx, "globex", "other", nil); err != nil {
		t.Fatal(err)
	}
	keys, err := f.store.ListAPIKeys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ID != key.ID || keys[0].ExpiresAt == nil || !keys[0].ExpiresAt.Equal(expiry) || keys[0].RevokedAt != nil {
		t.Errorf("ListAPIKeys(acme) = %+v", keys)
	}

	// Revoking is per tenant, immediate and idempotent.
	if err := f.store.RevokeAPIKey(ctx, "globex", key.ID, System); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeAPIKey by another tenant: %v, want ErrNotFound", err)
	}
	if err := f.store.RevokeAPIKey(ctx, "acme", key.ID, System); err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAPIKey(ctx, "acme", key.ID, System); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	assertAuthError(t, f, secret, "203.0.113.9", ErrUnauthenticated, "api key revoked")
	keys, _ = f.store.ListAPIKeys(ctx, "acme")
	if len(keys) != 1 || keys[0].RevokedAt == nil {
		t.Errorf("after revoke, ListAPIKeys = %+v", keys)
	}
}

func TestAPIKeyExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	expiry := f.clock.Now().Add(time.Minute)
	_, secret, err := f.store.CreateAPIKey(ctx, "acme", "short", &expiry)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(ctx, secret, "192.0.2.1"); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	f.clock.Advance(time.Minute)
	assertAuthError(t, f, secret, "192.0.2.1", ErrUnauthenticated, "api key expired")
}

func TestCreateAPIKeyErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	past := f.clock.Now().Add(-time.Second)
	now := f.clock.Now()
	tests := []struct {
		name, tenant string
		expiry       *time.Time
		wantErr      error
	}{
		{name: "no such tenant", tenant: "nobody", wantErr: ErrNotFound},
		{name: "expiry in the past", tenant: "acme", expiry: &past, wantErr: ErrInvalid},
		{name: "expiry now", tenant: "acme", expiry: &now, wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		if _, _, err := f.store.CreateAPIKey(ctx, tt.tenant, "k", tt.expiry); !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: CreateAPIKey error = %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	if _, err := f.store.ListAPIKeys(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListAPIKeys(nobody) error = %v, want ErrNotFound", err)
	}
	if keys, err := f.store.ListAPIKeys(ctx, "acme"); err != nil || len(keys) != 0 {
		t.Errorf("ListAPIKeys(acme) = %v, %v; want empty", keys, err)
	}
}

func TestAuthenticateRejectsForgeries(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	_, secret, err := f.store.CreateAPIKey(ctx, "acme", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Same prefix, different secret part: the prefix alone proves nothing.
	last := secret[len(secret)-1]
	flipped := secret[:len(secret)-1] + string(map[bool]byte{true: 'B', false: 'A'}[last == 'A'])
	_, otherPrefix, _ := newSecret(userScheme)
	tests := []struct {
		name, bearer, wantReason string
	}{
		{name: "empty", bearer: "", wantReason: "malformed bearer token"},
		{name: "garbage", bearer: "hunter2", wantReason: "malformed bearer token"},
		{name: "wrong secret", bearer: flipped, wantReason: "invalid api key"},
		{name: "unknown prefix", bearer: "tm_" + otherPrefix + secret[11:], wantReason: "invalid api key"},
		{name: "user secret as agent token", bearer: "tma_" + secret[3:], wantReason: "invalid agent token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertAuthError(t, f, tt.bearer, "192.0.2.1", ErrUnauthenticated, tt.wantReason)
		})
	}
}

// assertAuthError checks that Authenticate fails with an *AuthError of the
// given kind and reason.
func assertAuthError(t *testing.T, f fixture, bearer, ip string, wantKind error, wantReason string) {
	t.Helper()
	_, err := f.store.Authenticate(context.Background(), bearer, ip)
	var ae *AuthError
	if !errors.As(err, &ae) || !errors.Is(err, wantKind) || ae.Reason != wantReason {
		t.Errorf("Authenticate error = %v, want %v with reason %q", err, wantKind, wantReason)
	}
}

func TestAPIKeyLimitsAndLastUse(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.store.AddTenant(ctx, TenantSpec{ID: "acme", Name: "Acme", Tier: TierStandard, Limits: Limits{RPM: 100}}); err != nil {
		t.Fatal(err)
	}
	key, secret, err := f.store.AddAPIKey(ctx, APIKeySpec{TenantID: "acme", Name: "batch", Limits: Limits{RPM: 10, TPM: 2000}})
	if err != nil {
		t.Fatal(err)
	}
	if key.Limits != (Limits{RPM: 10, TPM: 2000}) || key.LastUsedAt != nil {
		t.Errorf("AddAPIKey = %+v", key)
	}
	got, err := f.store.LimitsOfKey(ctx, key.ID)
	if want := (KeyLimits{Key: Limits{RPM: 10, TPM: 2000}, Tenant: Limits{RPM: 100}}); err != nil || got != want {
		t.Errorf("LimitsOfKey = %+v, %v; want %+v", got, err, want)
	}
	if _, err := f.store.LimitsOfKey(ctx, "key_nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LimitsOfKey(unknown) error = %v, want ErrNotFound", err)
	}
	if _, _, err := f.store.AddAPIKey(ctx, APIKeySpec{TenantID: "acme", Limits: Limits{TPM: -1}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddAPIKey(negative tpm) error = %v, want ErrInvalid", err)
	}
	// A key's name is limited in characters, not bytes.
	if _, _, err := f.store.AddAPIKey(ctx, APIKeySpec{TenantID: "acme", Name: strings.Repeat("键", 255)}); err != nil {
		t.Errorf("AddAPIKey(255 characters) error = %v", err)
	}
	if _, _, err := f.store.AddAPIKey(ctx, APIKeySpec{TenantID: "acme", Name: strings.Repeat("键", 256)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddAPIKey(256 characters) error = %v, want ErrInvalid", err)
	}

	// Use is recorded at most once a minute.
	lastUsed := func() *time.Time {
		t.Helper()
		k, err := f.store.GetAPIKey(ctx, "acme", key.ID)
		if err != nil {
			t.Fatal(err)
		}
		return k.LastUsedAt
	}
	first := f.clock.Now()
	if _, err := f.store.Authenticate(ctx, secret, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); got == nil || !got.Equal(first) {
		t.Errorf("after first use, LastUsedAt = %v, want %v", got, first)
	}
	f.clock.Advance(59 * time.Second)
	if _, err := f.store.Authenticate(ctx, secret, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); got == nil || !got.Equal(first) {
		t.Errorf("59 s later, LastUsedAt = %v, want still %v", got, first)
	}
	// The key was authenticated from the database at 59 s and is trusted
	// from the cache for KeyCacheTTL; the next read of the database, over a
	// minute after the first use, records the use.
	f.clock.Advance(KeyCacheTTL)
	if _, err := f.store.Authenticate(ctx, secret, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); got == nil || !got.Equal(f.clock.Now()) {
		t.Errorf("a minute later, LastUsedAt = %v, want %v", got, f.clock.Now())
	}
	// A refused secret is not a use.
	f.clock.Advance(time.Hour)
	if err := f.store.RevokeAPIKey(ctx, "acme", key.ID, System); err != nil {
		t.Fatal(err)
	}
	assertAuthError(t, f, secret, "192.0.2.1", ErrUnauthenticated, "api key revoked")
	if got := lastUsed(); got == nil || !got.Equal(f.clock.Now().Add(-time.Hour)) {
		t.Errorf("a refused use moved LastUsedAt to %v", got)
	}

	if _, err := f.store.GetAPIKey(ctx, "globex", key.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetAPIKey by another tenant: %v, want ErrNotFound", err)
	}
}
