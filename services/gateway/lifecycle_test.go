package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

func TestNewValidatesConfig(t *testing.T) {
	db := pgtest.New(t).Open(t, schema)
	good := gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: "127.0.0.1:1", InternalToken: "x", DB: db}
	tests := []struct {
		name   string
		change func(*gateway.Config)
		want   string
	}{
		{"no http addr", func(c *gateway.Config) { c.HTTPAddr = "" }, "HTTPAddr"},
		{"no grpc addr", func(c *gateway.Config) { c.GRPCAddr = "" }, "GRPCAddr"},
		{"no scheduler", func(c *gateway.Config) { c.SchedulerTarget = "" }, "SchedulerTarget"},
		{"no internal token", func(c *gateway.Config) { c.InternalToken = "" }, "InternalToken"},
		{"no db", func(c *gateway.Config) { c.DB = nil }, "DB"},
		{"bad http addr", func(c *gateway.Config) { c.HTTPAddr = "256.0.0.1:1" }, "listen http"},
	}
	for _, tt := range tests {
		cfg := good
		tt.change(&cfg)
		g, err := gateway.New(context.Background(), cfg)
		if err == nil {
			g.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error = %v, want one naming %s", tt.name, err, tt.want)
		}
	}

	// A schema without the gateway's tables fails at New, not later.
	other := pgtest.New(t).Open(t, "not_migrated")
	cfg := good
	cfg.DB = other
	if g, err := gateway.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "Migrations") {
		if g != nil {
			g.Close()
		}
		t.Errorf("New on an unmigrated schema: %v", err)
	}

	// A busy port fails at New.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	cfg = good
	cfg.GRPCAddr = lis.Addr().String()
	if g, err := gateway.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "listen grpc") {
		if g != nil {
			g.Close()
		}
		t.Errorf("New on a busy port: %v", err)
	}
}

func TestRunStopsGracefully(t *testing.T) {
	db := pgtest.New(t).Open(t, schema)
	fake := schedulertest.Start(t, internalToken)
	gw, err := gateway.New(context.Background(), gateway.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: fake.Addr,
		InternalToken: internalToken, DB: db, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	creds := gw.Credentials()
	if _, err := creds.CreateTenant(context.Background(), "acme", "Acme", gateway.TierStandard); err != nil {
		t.Fatal(err)
	}
	_, secret, err := creds.CreateAPIKey(context.Background(), "acme", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	fake.Handle("GetTask", func(ctx context.Context, _ proto.Message) (proto.Message, error) {
		once.Do(func() { close(started) })
		time.Sleep(300 * time.Millisecond)
		return &taskv1.GetTaskResponse{Task: &taskv1.Task{Id: "slow"}}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()

	url := "http://" + gw.HTTPAddr()
	var wg sync.WaitGroup
	var inflight *http.Response
	var inflightErr error
	wg.Go(func() {
		req, _ := http.NewRequest("GET", url+"/api/v1/tasks/slow", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		// Retry until Run is serving.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if inflight, inflightErr = http.DefaultClient.Do(req); inflightErr == nil {
				return
			}
		}
	})
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the scheduler")
	}
	cancel() // stop while the request is in flight
	wg.Wait()
	if inflightErr != nil || inflight.StatusCode != 200 {
		t.Errorf("in-flight request: %v, %v; want it to finish", inflight, inflightErr)
	} else {
		inflight.Body.Close()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("the HTTP listener still accepts after Run returned")
	}
	if err := gw.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
	if err := gw.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("Close after Run: %v", err)
	}
}

func TestSchedulerUnavailable(t *testing.T) {
	db := pgtest.New(t).Open(t, schema)
	// Nothing listens on the scheduler's address.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := lis.Addr().String()
	lis.Close()
	gw, err := gateway.New(context.Background(), gateway.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: target,
		InternalToken: internalToken, DB: db, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	e := &env{gw: gw}
	creds := gw.Credentials()
	if _, err := creds.CreateTenant(context.Background(), "acme", "Acme", gateway.TierStandard); err != nil {
		t.Fatal(err)
	}
	_, secret, err := creds.CreateAPIKey(context.Background(), "acme", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.serve(t, "GET", "/healthz", "", "", "192.0.2.1:1"), 503, 30099, "scheduler connection not ready")
	assertEnvelope(t, e.serve(t, "GET", "/api/v1/tasks/t1", secret, "", "192.0.2.1:1"), 503, 30099, "service unavailable")
}
