package credentials

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
)

func TestAdminKeyLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key, secret, err := f.store.CreateAdminKey(ctx, "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "tmo_"+key.Prefix+"_") || len(secret) != 4+8+1+43 {
		t.Fatalf("secret has the wrong shape (len %d)", len(secret))
	}
	p, err := f.store.Authenticate(ctx, secret, "::ffff:192.0.2.8")
	if err != nil {
		t.Fatal(err)
	}
	if want := (authn.Principal{Kind: authn.KindAdmin, Subject: key.ID, RemoteIP: "192.0.2.8"}); p != want {
		t.Errorf("principal = %+v, want %+v", p, want)
	}
	keys, err := f.store.ListAdminKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != key.ID || keys[0].LastUsedAt == nil || !keys[0].LastUsedAt.Equal(f.clock.Now()) {
		t.Errorf("ListAdminKeys = %+v, %v", keys, err)
	}

	// Forgeries of the operator scheme are refused like the others.
	assertAuthError(t, f, secret[:len(secret)-1]+"x", "192.0.2.8", ErrUnauthenticated, "invalid admin key")
	assertAuthError(t, f, "tmo_"+secret[4:12]+"_"+strings.Repeat("A", 43), "192.0.2.8", ErrUnauthenticated, "invalid admin key")
	// The user scheme with the operator key's body names no user key.
	assertAuthError(t, f, "tm_"+secret[4:], "192.0.2.8", ErrUnauthenticated, "invalid api key")

	if err := f.store.RevokeAdminKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.store.RevokeAdminKey(ctx, key.ID); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	assertAuthError(t, f, secret, "192.0.2.8", ErrUnauthenticated, "admin key revoked")
	if err := f.store.RevokeAdminKey(ctx, "adm_nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeAdminKey(unknown) error = %v, want ErrNotFound", err)
	}

	expiry := f.clock.Now().Add(time.Minute)
	_, expiring, err := f.store.CreateAdminKey(ctx, "temp", &expiry)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	assertAuthError(t, f, expiring, "192.0.2.8", ErrUnauthenticated, "admin key expired")

	past := f.clock.Now()
	if _, _, err := f.store.CreateAdminKey(ctx, "late", &past); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateAdminKey(expiry now) error = %v, want ErrInvalid", err)
	}
	// A name is limited in characters, not bytes.
	if _, _, err := f.store.CreateAdminKey(ctx, strings.Repeat("运", 255), nil); err != nil {
		t.Errorf("CreateAdminKey(255 characters) error = %v", err)
	}
	if _, _, err := f.store.CreateAdminKey(ctx, strings.Repeat("运", 256), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateAdminKey(256 characters) error = %v, want ErrInvalid", err)
	}
	if _, _, err := f.store.CreateAdminKey(ctx, strings.Repeat("n", 256), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateAdminKey(long name) error = %v, want ErrInvalid", err)
	}
}

func TestBootstrapAdminKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	// Replicas starting at once: exactly one creates a key.
	const replicas = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []string
	)
	for range replicas {
		wg.Go(func() {
			k, secret, ok, err := f.store.BootstrapAdminKey(ctx, "bootstrap")
			if err != nil {
				t.Error(err)
				return
			}
			if ok != (secret != "") {
				t.Errorf("created %v, secret given %v", ok, secret != "")
			}
			if ok {
				mu.Lock()
				created = append(created, secret)
				mu.Unlock()
				if _, err := f.store.Authenticate(ctx, secret, "127.0.0.1"); err != nil {
					t.Errorf("bootstrapped key %s does not work: %v", k.ID, err)
				}
			}
		})
	}
	wg.Wait()
	if len(created) != 1 {
		t.Fatalf("%d replicas created a key, want 1", len(created))
	}
	if !strings.Contains(f.logs.String(), "admin key created") {
		t.Errorf("no log line for the created key:\n%s", f.logs.String())
	}
	assertNoSecret(t, f.logs.String(), created[0])

	// Once the only key is revoked, the next start creates another.
	keys, _ := f.store.ListAdminKeys(ctx)
	if err := f.store.RevokeAdminKey(ctx, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	_, secret, ok, err := f.store.BootstrapAdminKey(ctx, "bootstrap")
	if err != nil || !ok || secret == "" || secret == created[0] {
		t.Fatalf("after revocation: created %v, %v", ok, err)
	}
	if _, _, ok, err := f.store.BootstrapAdminKey(ctx, "bootstrap"); err != nil || ok {
		t.Errorf("with a usable key: created %v, %v", ok, err)
	}
}
