package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// GatewayOptions configures the gateway overhead benchmark.
type GatewayOptions struct {
	Common
	Clients int           // concurrent clients per path
	For     time.Duration // length of each measured phase
}

func (o *GatewayOptions) defaults() {
	o.Common.defaults()
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.For <= 0 {
		o.For = 10 * time.Second
	}
}

// GatewayResult holds the medians: one operation is a task submission
// followed by a read of that task.
type GatewayResult struct {
	REST, GRPC       float64 // operations/s
	Ratio            float64 // median of the runs' REST / GRPC
	RESTP99, GRPCP99 time.Duration
}

// Gateway measures what the REST facade costs: the same submit + get pairs
// through the gateway (HTTP/JSON, API key authentication, grpc-gateway, the
// gateway's gRPC hop to the scheduler) and over gRPC straight to the
// scheduler, alternating which goes first in each run, on one server.
func Gateway(ctx context.Context, o GatewayOptions) (*GatewayResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "gateway", nil)
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "gateway overhead: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	var rest, direct, ratios, restP99, directP99 sample
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		r, err := gatewayRun(ctx, env, o, run)
		if err != nil {
			return nil, err
		}
		rest, direct, ratios = append(rest, r.REST), append(direct, r.GRPC), append(ratios, r.REST/r.GRPC)
		restP99, directP99 = append(restP99, float64(r.RESTP99)), append(directP99, float64(r.GRPCP99))
		first := "REST"
		if run%2 == 0 {
			first = "gRPC"
		}
		rows = append(rows, []string{fmt.Sprint(run), first, perSecond(r.REST), ms(r.RESTP99), perSecond(r.GRPC),
			ms(r.GRPCP99), ratio(r.REST / r.GRPC)})
	}
	fmt.Fprintf(o.Out, "\n%d clients per path, %s per phase; one operation = submit a task + get it\n", o.Clients, o.For)
	table(o.Out, []string{"run", "first", "REST ops/s", "REST p99", "gRPC ops/s", "gRPC p99", "ratio"}, rows)
	res := &GatewayResult{REST: rest.median(), GRPC: direct.median(), Ratio: ratios.median(),
		RESTP99: time.Duration(restP99.median()), GRPCP99: time.Duration(directP99.median())}
	summary(o.Out, o.Runs, [][]string{
		{"REST through the gateway ops/s", rest.format(perSecond), "", ""},
		{"REST p99", restP99.format(millis), "", ""},
		{"gRPC to the scheduler ops/s", direct.format(perSecond), "", ""},
		{"gRPC p99", directP99.format(millis), "", ""},
		{"REST / gRPC throughput", ratios.format(ratio), ">= 0.7", verdict(res.Ratio >= 0.7)},
	})
	return res, nil
}

// gatewayRun measures both paths once against a fresh scheduler database.
func gatewayRun(ctx context.Context, env *env, o GatewayOptions, run int) (*GatewayResult, error) {
	s, err := startScheduler(ctx, env, fmt.Sprintf("gateway%d", run), scheduler.Timing{})
	if err != nil {
		return nil, err
	}
	defer s.stop()
	gpool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(s.db), Schema: "gateway", MaxConns: 16})
	if err != nil {
		return nil, err
	}
	defer gpool.Close()
	if err := pg.Migrate(ctx, gpool, "gateway", gateway.Migrations()...); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, err := gateway.New(runCtx, gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: s.addr,
		InternalToken: benchToken, DB: gpool, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	gwDone := make(chan struct{})
	go func() { defer close(gwDone); _ = g.Run(runCtx) }()
	defer func() { cancel(); <-gwDone }()
	// Limits the closed loop never reaches: the limiter runs on every
	// request, as in production, and refuses none.
	if _, err := g.Credentials().AddTenant(ctx, gateway.TenantSpec{ID: "bench", Name: "bench", Tier: gateway.TierPremium,
		Limits: gateway.Limits{RPM: gateway.MaxLimit, TPM: gateway.MaxLimit}}); err != nil {
		return nil, err
	}
	_, key, err := g.Credentials().CreateAPIKey(ctx, "bench", "bench", nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients, MaxConnsPerHost: o.Clients}}
	defer client.CloseIdleConnections()
	restOp := func(ctx context.Context) error { return restSubmitGet(ctx, client, "http://"+g.HTTPAddr(), key) }
	grpcOp := func(ctx context.Context) error {
		created, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "noop", Command: "true"}})
		if err != nil {
			return err
		}
		_, err = s.tasks.GetTask(asUser(ctx), &taskv1.GetTaskRequest{Id: created.GetTask().GetId()})
		return err
	}
	// Warm both paths (connections, prepared statements), then alternate
	// which phase goes first so neither always meets a colder server.
	for _, op := range []func(context.Context) error{restOp, grpcOp} {
		if _, _, err := closedLoop(ctx, o.Clients, time.Second, op); err != nil {
			return nil, err
		}
	}
	var res GatewayResult
	phases := []struct {
		op   func(context.Context) error
		rate *float64
		p99  *time.Duration
	}{{restOp, &res.REST, &res.RESTP99}, {grpcOp, &res.GRPC, &res.GRPCP99}}
	if run%2 == 0 {
		phases[0], phases[1] = phases[1], phases[0]
	}
	for _, p := range phases {
		rate, lat, err := closedLoop(ctx, o.Clients, o.For, p.op)
		if err != nil {
			return nil, err
		}
		*p.rate, *p.p99 = rate, percentile(lat, 99)
	}
	return &res, nil
}

// restSubmitGet is what a REST client of the task API does: POST a task,
// then GET it, with its API key.
func restSubmitGet(ctx context.Context, client *http.Client, base, key string) error {
	body := []byte(`{"name":"noop","command":"true"}`)
	var created struct {
		ID string `json:"id"`
	}
	if err := restCall(ctx, client, http.MethodPost, base+"/api/v1/tasks", key, body, &created); err != nil {
		return err
	}
	if created.ID == "" {
		return fmt.Errorf("POST /api/v1/tasks answered without a task id")
	}
	return restCall(ctx, client, http.MethodGet, base+"/api/v1/tasks/"+created.ID, key, nil, nil)
}

func restCall(ctx context.Context, client *http.Client, method, url, key string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// closedLoop runs op from n clients back to back for d and returns
// operations/s and every operation's latency.
func closedLoop(ctx context.Context, n int, d time.Duration, op func(context.Context) error) (float64, []time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				began := time.Now()
				if err := op(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(began))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, nil, firstErr
	}
	return float64(len(all)) / time.Since(start).Seconds(), all, nil
}
