package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminKeyFile(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "admin-key")

	secret, created, err := e.gw.AdminKeyFile(ctx, path, true)
	if err != nil || !created || !strings.HasPrefix(secret, "tmo_") {
		t.Fatalf("first bootstrap = %q, %v, %v", secret, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file: %v, %v; want mode 0600", fi, err)
	}
	// The file's key is reused.
	if again, created, err := e.gw.AdminKeyFile(ctx, path, true); err != nil || created || again != secret {
		t.Errorf("second call = %q, %v, %v; want the same key, not created", again, created, err)
	}
	// Another replica (another file) finds a usable key and creates none.
	other := filepath.Join(t.TempDir(), "admin-key")
	if s, created, err := e.gw.AdminKeyFile(ctx, other, true); err != nil || created || s != "" {
		t.Errorf("other replica = %q, %v, %v; want nothing created", s, created, err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a file was written without a key: %v", err)
	}
	// dev always gets a key.
	s, created, err := e.gw.AdminKeyFile(ctx, other, false)
	if err != nil || !created || s == secret {
		t.Errorf("dev = %q, %v, %v; want a new key", s, created, err)
	}
	// The key works on the admin API.
	if r := e.do(t, "GET", "/api/v1/admin/tenants", secret, ""); r.status != 200 {
		t.Errorf("admin API with the bootstrap key: %d %s", r.status, r.body)
	}
	if _, _, err := e.gw.AdminKeyFile(ctx, "", true); err == nil {
		t.Error("empty path accepted")
	}
	if _, _, err := e.gw.AdminKeyFile(ctx, t.TempDir(), true); err == nil {
		t.Error("a directory as the file accepted")
	}
}
