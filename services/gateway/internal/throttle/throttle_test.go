package throttle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/ratelimit"
)

func TestVideoCost(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int64
	}{
		{"prompt and default duration", `{"input":{"prompt":"hello"}}`, 5 + 500},
		{"runes, not bytes", `{"input":{"prompt":"视频生成"}}`, 4 + 500},
		{"prompt truncated to 800 runes", `{"input":{"prompt":"` + strings.Repeat("x", 801) + `"}}`, 800 + 500},
		{"explicit duration", `{"input":{"prompt":"ab"},"parameters":{"duration":5}}`, 2 + 500},
		{"other whole duration", `{"input":{"prompt":"ab"},"parameters":{"duration":10}}`, 2 + 1000},
		{"fractional duration counts as 5", `{"input":{"prompt":"ab"},"parameters":{"duration":2.5}}`, 2 + 500},
		{"zero duration counts as 5", `{"parameters":{"duration":0}}`, 500},
		{"huge duration counts as 5", `{"parameters":{"duration":100000}}`, 500},
		{"quoted duration counts as its number", `{"input":{"prompt":"ab"},"parameters":{"duration":"5"}}`, 502},
		{"a prompt of the wrong type: the body does not parse", `{"input":{"prompt":7}}`, 500},
		{"no prompt", `{"model":"wan2.2-t2v"}`, 500},
		{"malformed JSON", `{"input":`, 500},
		{"empty body", ``, 500},
		{"other fields are ignored", `{"model":"m","input":{"prompt":"abc","negative_prompt":"zzzz"},"parameters":{"seed":1}}`, 3 + 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VideoCost([]byte(tt.body), 100); got != tt.want {
				t.Errorf("VideoCost = %d, want %d", got, tt.want)
			}
		})
	}
}

// fakeLimits is a LimitSource counting its reads.
type fakeLimits struct {
	mu     sync.Mutex
	limits credentials.KeyLimits
	err    error
	reads  int
}

func (f *fakeLimits) LimitsOfKey(context.Context, string) (credentials.KeyLimits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.limits, f.err
}

var user = authn.Principal{Kind: authn.KindUser, TenantID: "t1", Subject: "key_1", Tier: credentials.TierStandard}

func newThrottle(src LimitSource, c *clocktest.Fixed, cfg Config) *Throttle {
	return New(ratelimit.NewMemory(c.Now), src, cfg, c.Now, slog.New(slog.DiscardHandler))
}

func TestCheckAgentsAndOperatorsAreNotLimited(t *testing.T) {
	src := &fakeLimits{limits: credentials.KeyLimits{Tenant: credentials.Limits{RPM: 1}}}
	th := newThrottle(src, clocktest.NewFixed(time.Unix(0, 0)), Config{})
	for _, p := range []authn.Principal{{Kind: authn.KindAgent, AgentID: "a"}, {Kind: authn.KindAdmin, Subject: "adm_1"}} {
		for range 3 {
			if _, err := th.Check(context.Background(), p, 1); err != nil {
				t.Errorf("%s: %v", p.Kind, err)
			}
		}
	}
	if src.reads != 0 {
		t.Errorf("limits read %d times for unlimited principals", src.reads)
	}
}

func TestCheckCachesLimits(t *testing.T) {
	src := &fakeLimits{limits: credentials.KeyLimits{Tenant: credentials.Limits{RPM: 100}}}
	c := clocktest.NewFixed(time.Unix(1000, 0))
	th := newThrottle(src, c, Config{CacheTTL: 10 * time.Second})
	for range 3 {
		if _, err := th.Check(context.Background(), user, 0); err != nil {
			t.Fatal(err)
		}
	}
	if src.reads != 1 {
		t.Fatalf("%d reads within the TTL, want 1", src.reads)
	}
	c.Advance(10 * time.Second)
	if _, err := th.Check(context.Background(), user, 0); err != nil {
		t.Fatal(err)
	}
	if src.reads != 2 {
		t.Errorf("%d reads after the TTL, want 2", src.reads)
	}
	th.Forget()
	if _, err := th.Check(context.Background(), user, 0); err != nil {
		t.Fatal(err)
	}
	if src.reads != 3 {
		t.Errorf("%d reads after Forget, want 3", src.reads)
	}
}

// The largest limit the store accepts is one the limiter can keep.
func TestCheckMaxLimit(t *testing.T) {
	src := &fakeLimits{limits: credentials.KeyLimits{
		Key:    credentials.Limits{RPM: credentials.MaxLimit, TPM: credentials.MaxLimit},
		Tenant: credentials.Limits{RPM: credentials.MaxLimit, TPM: credentials.MaxLimit},
	}}
	th := newThrottle(src, clocktest.NewFixed(time.Unix(0, 0)), Config{})
	u, err := th.Check(context.Background(), user, 1000)
	if err != nil || u.Requests == nil || u.Requests.Remaining != credentials.MaxLimit-1 || u.Tokens.Remaining != credentials.MaxLimit-1000 {
		t.Errorf("Check = %+v, %v", u, err)
	}
}

func TestCheckUnlimitedTierChargesNothing(t *testing.T) {
	src := &fakeLimits{}
	th := newThrottle(src, clocktest.NewFixed(time.Unix(0, 0)), Config{Tiers: map[string]credentials.Limits{}})
	u, err := th.Check(context.Background(), user, 1_000_000)
	if err != nil || u.Requests != nil || u.Tokens != nil {
		t.Errorf("Check = %+v, %v; want no limit and no usage", u, err)
	}
}

func TestMiddleware(t *testing.T) {
	src := &fakeLimits{limits: credentials.KeyLimits{Tenant: credentials.Limits{TPM: 2000}}}
	th := newThrottle(src, clocktest.NewFixed(time.Unix(0, 0)), Config{VideoTokensPerSecond: 100})
	var seen string
	h := th.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = string(b)
		w.WriteHeader(http.StatusAccepted)
	}))
	body := `{"input":{"prompt":"a cat"}}`
	serve := func(p *authn.Principal, r *http.Request) *httptest.ResponseRecorder {
		if p != nil {
			r = r.WithContext(authn.NewContext(r.Context(), *p))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	w := serve(&user, httptest.NewRequest("POST", "/v1/video/generations", strings.NewReader(body)))
	if w.Code != http.StatusAccepted || seen != body {
		t.Fatalf("status %d, handler saw %q; want 202 and the whole body", w.Code, seen)
	}
	if got := w.Header().Get("X-RateLimit-Remaining-Tokens"); got != "1495" {
		t.Errorf("remaining tokens %q, want 1495", got)
	}
	// Without a principal (not authenticated here) nothing is charged.
	if w := serve(nil, httptest.NewRequest("POST", "/v1/video/generations", strings.NewReader(body))); w.Code != http.StatusAccepted {
		t.Errorf("no principal: status %d", w.Code)
	}
	// A body over the size limit is refused before any charge.
	r := httptest.NewRequest("POST", "/v1/video/generations", strings.NewReader(strings.Repeat("x", 100)))
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 10)
	if w := serve(&user, r); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "request body too large") {
		t.Errorf("oversized body: status %d, body %s", w.Code, w.Body)
	}
	// The limits cannot be read: 503, the handler is not called.
	src.mu.Lock()
	src.err = errors.New("db down")
	src.mu.Unlock()
	th2 := newThrottle(src, clocktest.NewFixed(time.Unix(0, 0)), Config{})
	seen = ""
	w = httptest.NewRecorder()
	th2.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { seen = "called" })).ServeHTTP(w,
		httptest.NewRequest("GET", "/api/v1/tasks", nil).WithContext(authn.NewContext(context.Background(), user)))
	if w.Code != http.StatusServiceUnavailable || seen != "" {
		t.Errorf("limits unavailable: status %d, handler %q; want 503 and not called", w.Code, seen)
	}
}

func TestRefusalRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {time.Microsecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {59*time.Second + 1, 60}}
	for _, tt := range tests {
		if got := (&Refusal{RetryAfter: tt.d}).RetryAfterSeconds(); got != tt.want {
			t.Errorf("RetryAfterSeconds(%s) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func BenchmarkMiddlewareInProcess(b *testing.B) {
	src := &fakeLimits{limits: credentials.KeyLimits{Key: credentials.Limits{RPM: 1_000_000}, Tenant: credentials.Limits{RPM: 1_000_000, TPM: 1_000_000}}}
	th := New(ratelimit.NewMemory(nil), src, Config{}, nil, slog.New(slog.DiscardHandler))
	h := th.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/api/v1/tasks/t1", nil).WithContext(authn.NewContext(context.Background(), user))
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

// TestUnreadableLimitsAreOneLinePerWindow: while the limits cannot be read,
// every REST request and gRPC call is refused with its 503 or Unavailable,
// and the log gets one line for the window: both front doors log the same
// line.
func TestUnreadableLimitsAreOneLinePerWindow(t *testing.T) {
	src := &fakeLimits{err: errors.New("db down")}
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c := clocktest.NewFixed(time.Unix(0, 0))
	th := New(ratelimit.NewMemory(c.Now), src, Config{}, c.Now, log)
	h := th.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler called without limits") }))
	ctx := authn.NewContext(context.Background(), user)
	for range 10 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/tasks", nil).WithContext(ctx))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("REST status %d, want 503", w.Code)
		}
		if err := th.GRPCError(ctx, user); status.Code(err) != codes.Unavailable {
			t.Fatalf("gRPC: %v, want Unavailable", err)
		}
	}
	if n := strings.Count(logs.String(), `msg="reading rate limits failed"`); n != 1 {
		t.Errorf("%d lines for 20 failures, want one:\n%s", n, logs.String())
	}
}
