package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

const (
	schema        = "gateway"
	internalToken = "internal-token-0123456789abcdef"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, schema, gateway.Migrations()...)
	}))
}

// env is a running gateway in front of a fake scheduler, with a tenant
// "acme", one of its API keys and an agent token for agent-001.
type env struct {
	gw    *gateway.Gateway
	fake  *schedulertest.Fake
	creds *gateway.Credentials
	clock *clocktest.Fixed
	logs  *logbuf.Buffer
	db    *pgxpool.Pool

	userKey    gateway.APIKey
	userSecret string
	agentTok   gateway.AgentToken
	agentSec   string

	baseURL string
}

type envOption func(*gateway.Config)

func withTrustedProxies(ps ...string) envOption {
	return func(c *gateway.Config) {
		for _, p := range ps {
			c.TrustedProxies = append(c.TrustedProxies, netip.MustParsePrefix(p))
		}
	}
}

func withObjects(h http.Handler) envOption {
	return func(c *gateway.Config) { c.Objects = h }
}

// localFake stands for the env's fake scheduler in-process until newEnv,
// which starts the fake, puts its Local in its place.
type localFake struct{ grpc.ClientConnInterface }

// withLocalScheduler sends the REST API's unary calls to the fake
// in-process, as a gateway beside its scheduler does.
func withLocalScheduler() envOption {
	return func(c *gateway.Config) { c.SchedulerLocal = localFake{} }
}

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{
		db:    pgtest.New(t).Open(t, schema),
		fake:  schedulertest.Start(t, internalToken),
		clock: clocktest.NewFixed(time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)),
		logs:  &logbuf.Buffer{},
	}
	cfg := gateway.Config{
		HTTPAddr:        "127.0.0.1:0",
		GRPCAddr:        "127.0.0.1:0",
		SchedulerTarget: e.fake.Addr,
		InternalToken:   internalToken,
		DB:              e.db,
		Logger:          slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:             e.clock.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if _, ok := cfg.SchedulerLocal.(localFake); ok {
		cfg.SchedulerLocal = e.fake.Local
	}
	gw, err := gateway.New(ctx, cfg)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	e.gw, e.creds, e.baseURL = gw, gw.Credentials(), "http://"+gw.HTTPAddr()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e.waitHealthy(t)

	if _, err := e.creds.CreateTenant(ctx, "acme", "Acme", gateway.TierPremium); err != nil {
		t.Fatal(err)
	}
	if e.userKey, e.userSecret, err = e.creds.CreateAPIKey(ctx, "acme", "test", nil); err != nil {
		t.Fatal(err)
	}
	if e.agentTok, e.agentSec, err = e.creds.CreateAgentToken(ctx, "agent-001", "acme", nil, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(e.baseURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not healthy after 10s (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// response is a decoded HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic map.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// do sends a request to the running gateway. bearer "" sends no
// Authorization header.
func (e *env) do(t *testing.T, method, path, bearer, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.baseURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// assertEnvelope checks an error answer: status, and a body that is exactly
// {"code": code, "message": message, "data": null}.
func assertEnvelope(t *testing.T, r response, wantStatus, wantCode int, wantMessage string) {
	t.Helper()
	if r.status != wantStatus {
		t.Errorf("status = %d, want %d (body %s)", r.status, wantStatus, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	data, hasData := m["data"]
	if len(m) != 3 || !hasData || data != nil {
		t.Errorf("body = %s, want exactly code, message and data:null", r.body)
	}
	if m["code"] != float64(wantCode) {
		t.Errorf("code = %v, want %d (body %s)", m["code"], wantCode, r.body)
	}
	if wantMessage != "" && m["message"] != wantMessage {
		t.Errorf("message = %q, want %q", m["message"], wantMessage)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
