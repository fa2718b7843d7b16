package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// adminSecret bootstraps an operator key.
func (e *env) adminSecret(t *testing.T) string {
	t.Helper()
	_, secret, created, err := e.creds.BootstrapAdminKey(context.Background(), "test operator")
	if err != nil || !created {
		t.Fatalf("BootstrapAdminKey: created=%v, %v", created, err)
	}
	return secret
}

func TestRESTAdminTenants(t *testing.T) {
	e := newEnv(t)
	admin := e.adminSecret(t)

	r := e.do(t, "POST", "/api/v1/admin/tenants", admin, `{"tenant_id":"globex","name":"Globex","tier":"standard","rpm_limit":5}`)
	if r.status != http.StatusOK {
		t.Fatalf("create: status %d, body %s", r.status, r.body)
	}
	m := r.json(t)
	// Standard's default TPM applies; the tenant's own RPM is in force.
	if m["id"] != "globex" || m["name"] != "Globex" || m["tier"] != "standard" || m["rpm_limit"] != 5.0 ||
		m["tpm_limit"] != 0.0 || m["effective_rpm_limit"] != 5.0 || m["effective_tpm_limit"] != 100000.0 || m["created_at"] == nil {
		t.Errorf("created tenant = %s", r.body)
	}

	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/tenants", admin, `{"tenant_id":"globex","name":"Again","tier":"standard"}`),
		409, 409, `create tenant "globex": already exists`)

	bad := []struct{ name, body string }{
		{"bad tier", `{"tenant_id":"t2","name":"T","tier":"gold"}`},
		{"bad id", `{"tenant_id":"Bad Id","name":"T","tier":"standard"}`},
		{"empty name", `{"tenant_id":"t2","name":"","tier":"standard"}`},
		{"negative limit", `{"tenant_id":"t2","name":"T","tier":"standard","tpm_limit":-1}`},
		{"unknown field", `{"tenant_id":"t2","name":"T","tier":"standard","color":"red"}`},
	}
	for _, b := range bad {
		r := e.do(t, "POST", "/api/v1/admin/tenants", admin, b.body)
		if r.status != http.StatusBadRequest || r.json(t)["code"] != 30005.0 {
			t.Errorf("%s: status %d, body %s; want 400/30005", b.name, r.status, r.body)
		}
	}
	if _, err := e.creds.GetTenant(context.Background(), "t2"); err == nil {
		t.Error("a refused create made a tenant")
	}

	r = e.do(t, "PATCH", "/api/v1/admin/tenants/globex", admin, `{"tier":"premium","rpm_limit":0}`)
	if m := r.json(t); r.status != http.StatusOK || m["tier"] != "premium" || m["name"] != "Globex" || m["effective_rpm_limit"] != 3000.0 {
		t.Errorf("update: status %d, body %s", r.status, r.body)
	}
	assertEnvelope(t, e.do(t, "PATCH", "/api/v1/admin/tenants/nobody", admin, `{"name":"x"}`), 404, 404, "")

	r = e.do(t, "GET", "/api/v1/admin/tenants/globex", admin, "")
	if r.status != http.StatusOK || r.json(t)["tier"] != "premium" {
		t.Errorf("get: status %d, body %s", r.status, r.body)
	}
	assertEnvelope(t, e.do(t, "GET", "/api/v1/admin/tenants/nobody", admin, ""), 404, 404, `tenant "nobody": not found`)

	r = e.do(t, "GET", "/api/v1/admin/tenants?page_size=1", admin, "")
	m = r.json(t)
	if ts, _ := m["tenants"].([]any); r.status != http.StatusOK || len(ts) != 1 || m["next_page_token"] != "acme" {
		t.Fatalf("list page 1: status %d, body %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/api/v1/admin/tenants?page_size=1&page_token=acme", admin, "")
	if ts, _ := r.json(t)["tenants"].([]any); len(ts) != 1 || ts[0].(map[string]any)["id"] != "globex" {
		t.Errorf("list page 2: %s", r.body)
	}
}

func TestRESTAdminAPIKeys(t *testing.T) {
	e := newEnv(t)
	admin := e.adminSecret(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})

	expires := time.Now().Add(time.Hour).Format(time.RFC3339)
	r := e.do(t, "POST", "/api/v1/admin/tenants/acme/api-keys", admin, `{"name":"ci","expires_at":"`+expires+`","rpm_limit":10}`)
	if r.status != http.StatusOK {
		t.Fatalf("create key: status %d, body %s", r.status, r.body)
	}
	m := r.json(t)
	secret, _ := m["secret"].(string)
	key, _ := m["api_key"].(map[string]any)
	if !strings.HasPrefix(secret, "tm_") || key["name"] != "ci" || key["rpm_limit"] != 10.0 || key["expires_at"] == nil || key["tenant_id"] != "acme" {
		t.Fatalf("created key = %s", r.body)
	}
	keyID := key["id"].(string)
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.status != http.StatusOK {
		t.Fatalf("new key: status %d, body %s", r.status, r.body)
	}

	r = e.do(t, "GET", "/api/v1/admin/tenants/acme/api-keys", admin, "")
	if r.status != http.StatusOK || strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), "secret") {
		t.Fatalf("list: status %d, body %s (must not show secrets)", r.status, r.body)
	}
	keys, _ := r.json(t)["api_keys"].([]any)
	used := 0
	for _, k := range keys {
		if k := k.(map[string]any); k["id"] == keyID && k["last_used_at"] != nil {
			used++
		}
	}
	if len(keys) != 2 || used != 1 {
		t.Errorf("list = %s, want 2 keys, the new one used", r.body)
	}

	// Key limits within the tenant's; expiry in the future.
	for _, b := range []string{
		`{"name":"big","rpm_limit":5000}`, // premium: 3000
		`{"name":"past","expires_at":"2000-01-01T00:00:00Z"}`,
		`{"name":"neg","tpm_limit":-5}`,
	} {
		if r := e.do(t, "POST", "/api/v1/admin/tenants/acme/api-keys", admin, b); r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d, body %s; want 400", b, r.status, r.body)
		}
	}
	// The message docs/api/admin.md gives for a past expiry.
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/tenants/acme/api-keys", admin, `{"name":"past","expires_at":"2020-01-01T00:00:00Z"}`),
		400, 30005, "validation error: expires_at: must be greater than now")
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/tenants/nobody/api-keys", admin, `{"name":"x"}`), 404, 404, "")

	r = e.do(t, "POST", "/api/v1/admin/tenants/acme/api-keys/"+keyID+"/revoke", admin, `{}`)
	if r.status != http.StatusOK || r.json(t)["revoked_at"] == nil {
		t.Fatalf("revoke: status %d, body %s", r.status, r.body)
	}
	// Refused at once.
	assertEnvelope(t, e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""), 401, 401, "api key revoked")
	// Another tenant's key id is not found under this tenant.
	if _, err := e.creds.CreateTenant(context.Background(), "other", "Other", "standard"); err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/tenants/other/api-keys/"+keyID+"/revoke", admin, `{}`), 404, 404, "")
}

func TestRESTAdminNeedsOperatorKey(t *testing.T) {
	e := newEnv(t)
	admin := e.adminSecret(t)
	for _, bearer := range []string{e.userSecret, e.agentSec} {
		r := e.do(t, "GET", "/api/v1/admin/tenants", bearer, "")
		assertEnvelope(t, r, 403, 403, "the admin API needs an operator key (tmo_…)")
	}
	assertEnvelope(t, e.do(t, "GET", "/api/v1/admin/tenants", "", ""), 401, 401, "missing bearer token")
	// An operator key is for the admin API only.
	assertEnvelope(t, e.do(t, "GET", "/api/v1/tasks/task-001", admin, ""), 403, 403, "operator keys can only call /api/v1/admin/, quota, audit, usage and webhook delivery routes and repeat resets")
	if len(e.fake.Calls()) != 0 {
		t.Errorf("refused calls reached the scheduler: %v", e.fake.Calls())
	}
}

func TestGRPCAdmin(t *testing.T) {
	e := newEnv(t)
	admin := e.adminSecret(t)
	client := adminv1.NewAdminServiceClient(e.dial(t))

	ctx, cancel := outgoing(admin)
	defer cancel()
	tr, err := client.CreateTenant(ctx, &adminv1.CreateTenantRequest{TenantId: "initech", Name: "Initech", Tier: "premium", TpmLimit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if tr.GetTenant().GetEffectiveTpmLimit() != 500 || tr.GetTenant().GetEffectiveRpmLimit() != 3000 {
		t.Errorf("tenant = %v", tr.GetTenant())
	}
	kr, err := client.CreateApiKey(ctx, &adminv1.CreateApiKeyRequest{TenantId: "initech", Name: "k",
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(kr.GetSecret(), "tm_") || kr.GetApiKey().GetPrefix() == "" {
		t.Errorf("key = %v", kr)
	}
	lr, err := client.ListApiKeys(ctx, &adminv1.ListApiKeysRequest{TenantId: "initech"})
	if err != nil || len(lr.GetApiKeys()) != 1 {
		t.Fatalf("ListApiKeys = %v, %v", lr, err)
	}
	if _, err := client.RevokeApiKey(ctx, &adminv1.RevokeApiKeyRequest{TenantId: "initech", KeyId: kr.GetApiKey().GetId()}); err != nil {
		t.Fatal(err)
	}

	// Protovalidate runs on the front door too.
	_, err = client.CreateApiKey(ctx, &adminv1.CreateApiKeyRequest{TenantId: "initech", ExpiresAt: timestamppb.New(time.Now().Add(-time.Minute))})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("past expiry: %v, want InvalidArgument", err)
	}
	_, err = client.CreateTenant(ctx, &adminv1.CreateTenantRequest{TenantId: "x", Name: "X", Tier: "gold"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad tier: %v, want InvalidArgument", err)
	}
	_, err = client.CreateTenant(ctx, &adminv1.CreateTenantRequest{TenantId: "initech", Name: "X", Tier: "standard"})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("duplicate: %v, want AlreadyExists", err)
	}
	_, err = client.GetTenant(ctx, &adminv1.GetTenantRequest{TenantId: "nobody"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown tenant: %v, want NotFound", err)
	}

	// Users and agents are refused; so are calls without credentials.
	for _, bearer := range []string{e.userSecret, e.agentSec} {
		ctx, cancel := outgoing(bearer)
		_, err := client.ListTenants(ctx, &adminv1.ListTenantsRequest{})
		cancel()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("non-operator: %v, want PermissionDenied", err)
		}
	}
	ctx2, cancel2 := outgoing("")
	defer cancel2()
	if _, err := client.ListTenants(ctx2, &adminv1.ListTenantsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous: %v, want Unauthenticated", err)
	}
	// And an operator key does not reach the task API.
	if _, err := taskv1.NewTaskServiceClient(e.dial(t)).GetTask(ctx, &taskv1.GetTaskRequest{Id: "task-001"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("operator on the task API: %v, want PermissionDenied", err)
	}
}
