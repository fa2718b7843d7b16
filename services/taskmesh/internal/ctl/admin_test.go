package ctl

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestIntegrationTenantsAndKeys(t *testing.T) {
	s := newStack(t)
	_, adminKey, created, err := s.gw.Credentials().BootstrapAdminKey(context.Background(), "ctl tests")
	if err != nil || !created {
		t.Fatalf("BootstrapAdminKey: %v, %v", created, err)
	}
	admin := func(args ...string) result {
		t.Helper()
		return testApp(EnvServer, s.gw.GRPCAddr(), EnvAdminKey, adminKey).run(t, "", args...)
	}

	out := ok(t, admin("tenants", "create", "globex", "--name", "Globex Corp", "--tier", "premium", "--rpm", "50")).stdout
	if !strings.Contains(out, "globex") || !strings.Contains(out, "Globex Corp") || !strings.Contains(out, "premium") ||
		!strings.Contains(out, "1000000 (tier)") {
		t.Errorf("create output:\n%s", out)
	}
	fails(t, admin("tenants", "create", "globex"), "already exists")

	out = ok(t, admin("tenants", "list", "--limit", "1", "--all")).stdout
	if !strings.Contains(out, "globex") || !strings.Contains(out, tenant) {
		t.Errorf("list --all:\n%s", out)
	}
	// One page of more: the note goes to standard error, the table stays a
	// table.
	if r := ok(t, admin("tenants", "list", "--limit", "1")); strings.Contains(r.stdout, "more") ||
		!strings.Contains(r.stderr, "note: more tenants match; use --all to list them all") {
		t.Errorf("list --limit 1:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	out = ok(t, admin("tenants", "update", "globex", "--tier", "standard", "--tpm", "5000")).stdout
	if !strings.Contains(out, "standard") || !strings.Contains(out, "5000") {
		t.Errorf("update output:\n%s", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(ok(t, admin("tenants", "get", "globex", "-o", "json")).stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got["tier"] != "standard" || got["rpm_limit"] != 50.0 || got["tpm_limit"] != 5000.0 {
		t.Errorf("get -o json = %v", got)
	}
	fails(t, admin("tenants", "get", "nobody"), "not found")

	out = ok(t, admin("keys", "create", "--tenant", "globex", "--name", "ci", "--expires", "720h", "--rpm", "10")).stdout
	secret := regexp.MustCompile(`tm_[a-z0-9]+_[A-Za-z0-9_-]+`).FindString(out)
	if secret == "" || !strings.Contains(out, "shown only now") {
		t.Fatalf("keys create output:\n%s", out)
	}
	// The new key works for the tenant's task API.
	ok(t, testApp(EnvServer, s.gw.GRPCAddr(), EnvAPIKey, secret).run(t, "", "tasks", "list"))

	out = ok(t, admin("keys", "list", "--tenant", "globex")).stdout
	if strings.Contains(out, secret) || !strings.Contains(out, "ci") {
		t.Errorf("keys list shows the secret or misses the key:\n%s", out)
	}
	id := regexp.MustCompile(`key_[a-z0-9]+`).FindString(out)
	ok(t, admin("keys", "revoke", "--tenant", "globex", id))
	fails(t, testApp(EnvServer, s.gw.GRPCAddr(), EnvAPIKey, secret).run(t, "", "tasks", "list"), "api key revoked")
	fails(t, admin("keys", "revoke", "--tenant", tenant, id), "not found")

	// A tenant's API key is not an operator key.
	fails(t, testApp(EnvServer, s.gw.GRPCAddr(), EnvAdminKey, s.apiKey).run(t, "", "tenants", "list"), "permission denied")
}

func TestAdminUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "create"}, "no tenant id given"},
		{[]string{"tenants", "create", "a", "--tier", "gold"}, "--tier gold"},
		{[]string{"tenants", "create", "a", "--rpm", "-1"}, "--rpm -1"},
		{[]string{"tenants", "update", "a"}, "nothing to change"},
		{[]string{"tenants", "list", "--limit", "0"}, "--limit 0"},
		{[]string{"keys", "create"}, "--tenant is required"},
		{[]string{"keys", "create", "--tenant", "a", "--expires", "-5m"}, "not in the future"},
		{[]string{"keys", "create", "--tenant", "a", "--expires", "soon"}, "neither a duration"},
		{[]string{"keys", "revoke", "--tenant", "a"}, "want one key id"},
		{[]string{"keys", "list"}, "--tenant is required"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := testApp(EnvAdminKey, "tmo_x_y").run(t, "", tt.args...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, ExitUsage, tt.want)
			}
		})
	}
	// No operator key: a usage error naming where to put one, even with
	// an API key at hand.
	r := testApp(EnvAPIKey, "tm_a_b").run(t, "", "tenants", "list")
	if r.code != ExitUsage || !strings.Contains(r.stderr, EnvAdminKey) {
		t.Errorf("no operator key: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, err := parseExpiry("48h", now); err != nil || !got.Equal(now.Add(48*time.Hour)) {
		t.Errorf("48h = %v, %v", got, err)
	}
	if got, err := parseExpiry("2027-01-01T00:00:00Z", now); err != nil || got.Year() != 2027 {
		t.Errorf("RFC 3339 = %v, %v", got, err)
	}
	for _, bad := range []string{"0s", "-1h", "tomorrow", ""} {
		if _, err := parseExpiry(bad, now); err == nil {
			t.Errorf("parseExpiry(%q) succeeded", bad)
		}
	}
}
