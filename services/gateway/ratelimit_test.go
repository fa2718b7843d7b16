package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/redistest"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

// limitedKey creates tenant id with the limits and returns a key's secret.
func (e *env) limitedKey(t *testing.T, id string, tenant, key gateway.Limits) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.creds.AddTenant(ctx, gateway.TenantSpec{ID: id, Name: id, Tier: gateway.TierStandard, Limits: tenant}); err != nil {
		t.Fatal(err)
	}
	_, secret, err := e.creds.AddAPIKey(ctx, gateway.APIKeySpec{TenantID: id, Name: "limited", Limits: key})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

func TestRESTRateLimitTaskAPI(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	secret := e.limitedKey(t, "slow", gateway.Limits{RPM: 2}, gateway.Limits{})

	for i := range 2 {
		r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, "")
		if r.status != http.StatusOK {
			t.Fatalf("request %d: status %d, body %s", i, r.status, r.body)
		}
		if got, want := r.header.Get("X-RateLimit-Remaining-Requests"), fmt.Sprint(1-i); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining-Requests = %q, want %q", i, got, want)
		}
		if got := r.header.Get("X-RateLimit-Limit-Requests"); got != "2" {
			t.Errorf("X-RateLimit-Limit-Requests = %q, want 2", got)
		}
	}
	r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, "")
	assertEnvelope(t, r, 429, 429, "tenant limit of 2 requests per minute exceeded")
	if got := r.header.Get("Retry-After"); got != "30" {
		t.Errorf("Retry-After = %q, want 30", got)
	}
	calls := len(e.fake.Calls())

	// Another tenant is not affected.
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", e.userSecret, ""); r.status != http.StatusOK {
		t.Errorf("another tenant: status %d, body %s", r.status, r.body)
	}
	if got := len(e.fake.Calls()); got != calls+1 {
		t.Errorf("the refused request reached the scheduler: %d calls, want %d", got, calls+1)
	}

	// Retry-After is rounded up: 29.5 s left answers 30.
	e.clock.Advance(500 * time.Millisecond)
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.header.Get("Retry-After") != "30" {
		t.Errorf("after 0.5 s: status %d, Retry-After %q, want 429 and 30", r.status, r.header.Get("Retry-After"))
	}
	e.clock.Advance(29500 * time.Millisecond)
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.status != http.StatusOK {
		t.Errorf("after Retry-After: status %d, body %s", r.status, r.body)
	}
}

func TestRESTRateLimitKeyWithinTenant(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	secret := e.limitedKey(t, "keyed", gateway.Limits{RPM: 100}, gateway.Limits{RPM: 1})
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.status != http.StatusOK {
		t.Fatalf("status %d, body %s", r.status, r.body)
	}
	r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, "")
	assertEnvelope(t, r, 429, 429, "API key limit of 1 requests per minute exceeded")
	if got := r.header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
	}
	// A second key of the same tenant has its own key limit (none).
	_, other, err := e.creds.AddAPIKey(context.Background(), gateway.APIKeySpec{TenantID: "keyed", Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", other, ""); r.status != http.StatusOK {
		t.Errorf("other key: status %d, body %s", r.status, r.body)
	}
}

// assertVideoThrottled checks the video API's 429 body.
func assertVideoThrottled(t *testing.T, r response, wantMessage string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429 (body %s)", r.status, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	if len(m) != 3 || m["code"] != "Throttling" || m["message"] != wantMessage || m["request_id"] != r.header.Get("X-Request-Id") || m["request_id"] == "" {
		t.Errorf("body = %s, want {code: Throttling, message: %q, request_id: the X-Request-Id}", r.body, wantMessage)
	}
}

func TestRESTRateLimitVideoEnvelope(t *testing.T) {
	e := newEnv(t)
	secret := e.limitedKey(t, "video", gateway.Limits{RPM: 1}, gateway.Limits{})
	if r := e.do(t, "GET", "/api/v1/video/generations/tasks/t1", secret, ""); r.status == http.StatusTooManyRequests {
		t.Fatalf("first request throttled: %s", r.body)
	}
	r := e.do(t, "GET", "/api/v1/video/generations/tasks/t1", secret, "")
	assertVideoThrottled(t, r, "tenant limit of 1 requests per minute exceeded")
	if got := r.header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
	}
	r = e.do(t, "GET", "/v1/video/generations/t1", secret, "")
	assertVideoThrottled(t, r, "tenant limit of 1 requests per minute exceeded")
}

func TestRESTTokensPerMinuteVideoCost(t *testing.T) {
	e := newEnv(t)
	// The default cost is 100 tokens per second of video.
	secret := e.limitedKey(t, "tpm", gateway.Limits{TPM: 2000}, gateway.Limits{})
	// 300 runes (600 bytes) + 5 s × 100 = 800 tokens.
	body := mustJSON(map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": strings.Repeat("é", 300)}})
	r := e.do(t, "POST", "/v1/video/generations", secret, body)
	if r.status == http.StatusTooManyRequests {
		t.Fatalf("first request throttled: %s", r.body)
	}
	if got := r.header.Get("X-RateLimit-Remaining-Tokens"); got != "1200" {
		t.Errorf("X-RateLimit-Remaining-Tokens = %q, want 1200", got)
	}
	if r := e.do(t, "POST", "/v1/video/generations", secret, body); r.header.Get("X-RateLimit-Remaining-Tokens") != "400" {
		t.Errorf("second: status %d, remaining tokens %q, want 400", r.status, r.header.Get("X-RateLimit-Remaining-Tokens"))
	}
	r = e.do(t, "POST", "/v1/video/generations", secret, body)
	assertVideoThrottled(t, r, "tenant limit of 2000 tokens per minute exceeded")
	// 400 tokens remain; 800 are needed: 400 more at 2000 a minute is 12 s.
	if got := r.header.Get("Retry-After"); got != "12" {
		t.Errorf("Retry-After = %q, want 12", got)
	}
	// A short request still fits: 10 runes + an explicit duration of 3 s.
	short := mustJSON(map[string]any{"input": map[string]any{"prompt": "0123456789"}, "parameters": map[string]any{"duration": 3}})
	if r := e.do(t, "POST", "/v1/video/generations", secret, short); r.status == http.StatusTooManyRequests || r.header.Get("X-RateLimit-Remaining-Tokens") != "90" {
		t.Errorf("short request: status %d, remaining tokens %q, want 90", r.status, r.header.Get("X-RateLimit-Remaining-Tokens"))
	}
	// Other routes cost no tokens by default.
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.status == http.StatusTooManyRequests {
		t.Errorf("task API throttled by tokens: %s", r.body)
	}
}

func TestRESTTokensPerMinuteNeverFits(t *testing.T) {
	e := newEnv(t)
	secret := e.limitedKey(t, "tiny", gateway.Limits{TPM: 1000}, gateway.Limits{})
	// 10 runes + 3 s × 100 = 310 tokens, of the tenant's 1000.
	short := mustJSON(map[string]any{"input": map[string]any{"prompt": "0123456789"}, "parameters": map[string]any{"duration": 3}})
	if r := e.do(t, "POST", "/v1/video/generations", secret, short); r.status == http.StatusTooManyRequests {
		t.Fatalf("short request throttled: %s", r.body)
	}
	// A prompt of 2000 runes counts as 800: 800 + 500 = 1300 > 1000.
	body := mustJSON(map[string]any{"input": map[string]any{"prompt": strings.Repeat("a", 2000)}})
	r := e.do(t, "POST", "/v1/video/generations", secret, body)
	assertVideoThrottled(t, r, "request costs 1300 tokens, more than the tenant limit of 1000 tokens per minute")
	if got := r.header.Get("Retry-After"); got != "" {
		t.Errorf("Retry-After = %q for a request that never fits, want none", got)
	}
	// The limits as they stand, nothing charged for the refused request:
	// the standard tier's 600 requests a minute, one used; 690 tokens
	// left, the 310 used rested in 18.6 s.
	want := map[string]string{
		"X-RateLimit-Limit-Requests": "600", "X-RateLimit-Remaining-Requests": "599", "X-RateLimit-Reset-Requests": "1",
		"X-RateLimit-Limit-Tokens": "1000", "X-RateLimit-Remaining-Tokens": "690", "X-RateLimit-Reset-Tokens": "19",
	}
	for h, v := range want {
		if got := r.header.Get(h); got != v {
			t.Errorf("%s = %q on the refusal, want %q", h, got, v)
		}
	}
	if r := e.do(t, "POST", "/v1/video/generations", secret, short); r.header.Get("X-RateLimit-Remaining-Tokens") != "380" ||
		r.header.Get("X-RateLimit-Remaining-Requests") != "598" {
		t.Errorf("next request: status %d, remaining tokens %q and requests %q, want 380 and 598", r.status,
			r.header.Get("X-RateLimit-Remaining-Tokens"), r.header.Get("X-RateLimit-Remaining-Requests"))
	}
}

func TestRESTRateLimitTierDefaults(t *testing.T) {
	e := newEnv(t, func(c *gateway.Config) {
		c.RateLimits.Tiers = map[string]gateway.Limits{gateway.TierStandard: {RPM: 1}}
	})
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	std := e.limitedKey(t, "std", gateway.Limits{}, gateway.Limits{})
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", std, ""); r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	assertEnvelope(t, e.do(t, "GET", "/api/v1/tasks/task-001", std, ""), 429, 429, "tenant limit of 1 requests per minute exceeded")
	// Premium (acme) has no default in this configuration: unlimited.
	for range 5 {
		if r := e.do(t, "GET", "/api/v1/tasks/task-001", e.userSecret, ""); r.status != http.StatusOK {
			t.Fatalf("premium tenant: status %d, body %s", r.status, r.body)
		}
	}
	// The tenant's own limit overrides its tier's.
	rpm := 3
	if _, err := e.creds.UpdateTenant(context.Background(), "std", gateway.TenantUpdate{RPM: &rpm}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute) // also past the limit cache's lifetime
	for i := range 3 {
		if r := e.do(t, "GET", "/api/v1/tasks/task-001", std, ""); r.status != http.StatusOK {
			t.Fatalf("request %d after raising the limit: status %d", i, r.status)
		}
	}
}

// A change through this gateway's admin API applies from the next request,
// without waiting for the limit cache to expire.
func TestRESTRateLimitChangeAppliesAtOnce(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	admin := e.adminSecret(t)
	secret := e.limitedKey(t, "changing", gateway.Limits{RPM: 5}, gateway.Limits{})
	if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	if r := e.do(t, "PATCH", "/api/v1/admin/tenants/changing", admin, `{"rpm_limit":1}`); r.status != http.StatusOK {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	// Four more would fit the old limit; the new one is used up.
	assertEnvelope(t, e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""), 429, 429, "tenant limit of 1 requests per minute exceeded")
}

func TestGRPCRateLimit(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	secret := e.limitedKey(t, "grpc", gateway.Limits{RPM: 1}, gateway.Limits{})
	client := taskv1.NewTaskServiceClient(e.dial(t))
	ctx, cancel := outgoing(secret)
	defer cancel()
	if _, err := client.GetTask(ctx, &taskv1.GetTaskRequest{Id: "task-001"}); err != nil {
		t.Fatal(err)
	}
	_, err := client.GetTask(ctx, &taskv1.GetTaskRequest{Id: "task-001"})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "tenant limit of 1 requests per minute exceeded" {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != time.Minute {
		t.Errorf("RetryInfo = %v, want a retry delay of 1m", retry)
	}
}

// gatewayOn starts a gateway on db in front of the fake scheduler.
func gatewayOn(t *testing.T, db *pgxpool.Pool, fake *schedulertest.Fake, redisURL string) *gateway.Gateway {
	t.Helper()
	g, err := gateway.New(context.Background(), gateway.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: fake.Addr,
		InternalToken: internalToken, DB: db, Logger: slog.New(slog.DiscardHandler),
		RateLimits: gateway.RateLimits{RedisURL: redisURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return g
}

// countAllowed sends n requests at once, spread over the gateways, and
// counts those let through: not refused with 429. An authentication
// failure or a server error fails the test.
func countAllowed(t *testing.T, gws []*gateway.Gateway, secret string, n int, method, path, body string) int {
	t.Helper()
	var (
		wg      sync.WaitGroup
		allowed atomic.Int32
		failed  atomic.Value
	)
	for i := range n {
		wg.Go(func() {
			g := gws[i%len(gws)]
			req, err := http.NewRequest(method, "http://"+g.HTTPAddr()+path, strings.NewReader(body))
			if err != nil {
				failed.Store(err.Error())
				return
			}
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				failed.Store(err.Error())
				return
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusTooManyRequests:
			case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden, resp.StatusCode >= 500:
				failed.Store(fmt.Sprintf("request %d: status %d", i, resp.StatusCode))
			default:
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	return int(allowed.Load())
}

// TestTwoGatewaysShareOneLimit: two replicas on one Redis allow a tenant's
// limit once in total; without Redis each would allow all of it.
func TestTwoGatewaysShareOneLimit(t *testing.T) {
	redisSrv := redistest.Start(t)
	db := pgtest.New(t).Open(t, schema)
	fake := schedulertest.Start(t, internalToken)
	fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	creds := gateway.NewCredentials(db, nil)
	ctx := context.Background()
	if _, err := creds.AddTenant(ctx, gateway.TenantSpec{ID: "shared", Name: "Shared", Tier: gateway.TierStandard, Limits: gateway.Limits{RPM: 10}}); err != nil {
		t.Fatal(err)
	}
	_, secret, err := creds.AddAPIKey(ctx, gateway.APIKeySpec{TenantID: "shared", Name: "k"})
	if err != nil {
		t.Fatal(err)
	}

	shared := []*gateway.Gateway{gatewayOn(t, db, fake, redisSrv.URL), gatewayOn(t, db, fake, redisSrv.URL)}
	// 10 a minute is one every 6 s: the 40 concurrent requests take far
	// less, so exactly the burst of 10 passes.
	if got := countAllowed(t, shared, secret, 40, "GET", "/api/v1/tasks/task-001", ""); got != 10 {
		t.Errorf("two replicas sharing Redis allowed %d of 40, want 10", got)
	}

	// Tokens too: 2000 a minute, 800 a video request, two fit in total.
	if _, err := creds.AddTenant(ctx, gateway.TenantSpec{ID: "tokens", Name: "Tokens", Tier: gateway.TierStandard, Limits: gateway.Limits{TPM: 2000}}); err != nil {
		t.Fatal(err)
	}
	_, tokenSecret, err := creds.AddAPIKey(ctx, gateway.APIKeySpec{TenantID: "tokens", Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	video := mustJSON(map[string]any{"input": map[string]any{"prompt": strings.Repeat("p", 300)}})
	if got := countAllowed(t, shared, tokenSecret, 10, "POST", "/v1/video/generations", video); got != 2 {
		t.Errorf("two replicas sharing Redis let %d video requests of 800 tokens through a 2000 TPM limit, want 2", got)
	}

	// The failure this guards against: replicas limiting alone.
	if _, err := creds.AddTenant(ctx, gateway.TenantSpec{ID: "alone", Name: "Alone", Tier: gateway.TierStandard, Limits: gateway.Limits{RPM: 10}}); err != nil {
		t.Fatal(err)
	}
	_, secret2, err := creds.AddAPIKey(ctx, gateway.APIKeySpec{TenantID: "alone", Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	alone := []*gateway.Gateway{gatewayOn(t, db, fake, ""), gatewayOn(t, db, fake, "")}
	if got := countAllowed(t, alone, secret2, 40, "GET", "/api/v1/tasks/task-001", ""); got != 20 {
		t.Errorf("two in-process replicas allowed %d of 40; the comparison expects 20 (10 each)", got)
	}
}

// TestRateLimitRedisDown: with Redis unreachable, requests pass (and the
// failure is logged, once for the window: every request meets it) rather
// than every tenant being refused.
func TestRateLimitRedisDown(t *testing.T) {
	redisSrv := redistest.Start(t)
	url := redisSrv.URL
	redisSrv.Stop()
	e := newEnv(t, func(c *gateway.Config) { c.RateLimits.RedisURL = url })
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	secret := e.limitedKey(t, "down", gateway.Limits{RPM: 1}, gateway.Limits{})
	for range 5 {
		if r := e.do(t, "GET", "/api/v1/tasks/task-001", secret, ""); r.status != http.StatusOK {
			t.Fatalf("status %d with Redis down, want 200; body %s", r.status, r.body)
		}
	}
	checkFolded(t, e.logs.String(), "rate limiter unavailable; request let through", "WARN", 5)
}

func TestGatewayRateLimitConfigErrors(t *testing.T) {
	db := pgtest.New(t).Open(t, schema)
	base := gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: "127.0.0.1:1",
		InternalToken: internalToken, DB: db, Logger: slog.New(slog.DiscardHandler)}
	tests := []struct {
		name string
		rl   gateway.RateLimits
		want string
	}{
		{"bad redis url", gateway.RateLimits{RedisURL: "http://user:secret@x"}, "RedisURL does not parse"},
		{"negative video cost", gateway.RateLimits{VideoTokensPerSecond: -1}, "must not be negative"},
		{"negative route cost", gateway.RateLimits{OtherRouteTokens: -1}, "must not be negative"},
		{"negative tier limit", gateway.RateLimits{Tiers: map[string]gateway.Limits{"standard": {RPM: -1}}}, "limits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.RateLimits = tt.rl
			g, err := gateway.New(context.Background(), cfg)
			if err == nil {
				g.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q, want it to contain %q and no password", err, tt.want)
			}
		})
	}
}
