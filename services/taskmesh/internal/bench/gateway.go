package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// GatewayOptions configures the gateway overhead benchmark.
type GatewayOptions struct {
	Common
	Clients int           // concurrent clients per path
	For     time.Duration // how long each path is measured, in all
	Slice   time.Duration // one turn of a path; the paths take turns
}

func (o *GatewayOptions) defaults() {
	o.Common.defaults()
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.For <= 0 {
		o.For = 10 * time.Second
	}
	if o.Slice <= 0 {
		o.Slice = time.Second
	}
}

// GatewayResult holds the medians: one operation is a task submission
// followed by a read of that task.
type GatewayResult struct {
	// REST is through a gateway beside the scheduler (its REST calls
	// in-process, as `taskmesh dev` runs it), RESTHop through a gateway
	// that reaches the scheduler over loopback gRPC (as a gateway process
	// of its own does), GRPC straight to the scheduler: operations/s.
	REST, RESTHop, GRPC float64
	Ratio, HopRatio     float64 // medians of the runs' REST / GRPC and RESTHop / GRPC
	RESTP99, GRPCP99    time.Duration
}

// gatewayTarget is the REST / gRPC throughput ratio the facade must reach.
const gatewayTarget = 0.9

// Gateway measures what the REST facade costs: the same submit + get pairs
// through the gateway (HTTP/JSON, API key authentication, rate limits,
// grpc-gateway) and over gRPC straight to the scheduler, on one server. The
// gateway runs twice: beside the scheduler, calling it in-process, and
// reaching it over loopback gRPC. The three paths take turns of o.Slice
// until each has run o.For, so that all of them meet the same database.
func Gateway(ctx context.Context, o GatewayOptions) (*GatewayResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "gateway", nil)
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "gateway overhead: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	var rest, hop, direct, ratios, hopRatios, restP99, directP99 sample
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		r, err := gatewayRun(ctx, env, o, run)
		if err != nil {
			return nil, err
		}
		rest, hop, direct = append(rest, r.REST.rate), append(hop, r.hop.rate), append(direct, r.grpc.rate)
		ratios, hopRatios = append(ratios, r.REST.rate/r.grpc.rate), append(hopRatios, r.hop.rate/r.grpc.rate)
		restP99, directP99 = append(restP99, float64(r.REST.p99)), append(directP99, float64(r.grpc.p99))
		rows = append(rows, []string{fmt.Sprint(run), r.first, perSecond(r.REST.rate), ms(r.REST.p99), r.REST.cpu(),
			perSecond(r.hop.rate), r.hop.cpu(), perSecond(r.grpc.rate), ms(r.grpc.p99), r.grpc.cpu(),
			ratio(r.REST.rate / r.grpc.rate), ratio(r.hop.rate / r.grpc.rate)})
	}
	fmt.Fprintf(o.Out, "\n%d clients per path, %s per path in turns of %s; one operation = submit a task + get it; "+
		"CPU/op = total (this process + Postgres), µs\n", o.Clients, o.For, o.Slice)
	table(o.Out, []string{"run", "first", "REST ops/s", "REST p99", "CPU/op", "REST hop ops/s", "CPU/op",
		"gRPC ops/s", "gRPC p99", "CPU/op", "ratio", "hop ratio"}, rows)
	res := &GatewayResult{REST: rest.median(), RESTHop: hop.median(), GRPC: direct.median(), Ratio: ratios.median(),
		HopRatio: hopRatios.median(), RESTP99: time.Duration(restP99.median()), GRPCP99: time.Duration(directP99.median())}
	summary(o.Out, o.Runs, [][]string{
		{"REST through the gateway ops/s", rest.format(perSecond), "", ""},
		{"REST p99", restP99.format(millis), "", ""},
		{"REST through a gateway over loopback gRPC ops/s", hop.format(perSecond), "", ""},
		{"gRPC to the scheduler ops/s", direct.format(perSecond), "", ""},
		{"gRPC p99", directP99.format(millis), "", ""},
		{"REST / gRPC throughput", ratios.format(ratio), fmt.Sprintf(">= %.1f", gatewayTarget), verdict(res.Ratio >= gatewayTarget)},
		{"REST over loopback gRPC / gRPC throughput", hopRatios.format(ratio), "", ""},
	})
	return res, nil
}

// phaseResult is one closed-loop phase: operations/s, p99, and the CPU
// time this process and the Postgres server spent per operation.
type phaseResult struct {
	rate         float64
	p99          time.Duration
	self, server time.Duration
}

// cpu is the CPU per operation with its two parts, this process's and
// Postgres's: the paths differ mostly in the first.
func (p phaseResult) cpu() string {
	return fmt.Sprintf("%d (%d+%d)", (p.self + p.server).Microseconds(), p.self.Microseconds(), p.server.Microseconds())
}

type gatewayRunResult struct {
	REST, hop, grpc phaseResult
	first           string
}

// gatewayRun measures every path once against a fresh scheduler database.
func gatewayRun(ctx context.Context, env *env, o GatewayOptions, run int) (*gatewayRunResult, error) {
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
	var gwDone sync.WaitGroup
	defer gwDone.Wait()
	defer cancel()
	// Two gateways on the same credentials: one beside the scheduler, one
	// reaching it over the network.
	var bases []string
	var creds *gateway.Credentials
	for _, local := range []grpc.ClientConnInterface{s.local, nil} {
		g, err := gateway.New(runCtx, gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: s.addr,
			SchedulerLocal: local, InternalToken: benchToken, DB: gpool, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		gwDone.Add(1)
		go func() { defer gwDone.Done(); _ = g.Run(runCtx) }()
		bases, creds = append(bases, "http://"+g.HTTPAddr()), g.Credentials()
	}
	// Limits the closed loop never reaches: the limiter runs on every
	// request, as in production, and refuses none.
	if _, err := creds.AddTenant(ctx, gateway.TenantSpec{ID: "bench", Name: "bench", Tier: gateway.TierPremium,
		Limits: gateway.Limits{RPM: gateway.MaxLimit, TPM: gateway.MaxLimit}}); err != nil {
		return nil, err
	}
	_, key, err := creds.CreateAPIKey(ctx, "bench", "bench", nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients, MaxConnsPerHost: o.Clients}}
	defer client.CloseIdleConnections()
	grpcOp := func(ctx context.Context) error {
		created, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "noop", Command: "true"}})
		if err != nil {
			return err
		}
		_, err = s.tasks.GetTask(asUser(ctx), &taskv1.GetTaskRequest{Id: created.GetTask().GetId()})
		return err
	}
	var res gatewayRunResult
	phases := []struct {
		name string
		op   func(context.Context) error
		out  *phaseResult
	}{
		{"REST", func(ctx context.Context) error { return restSubmitGet(ctx, client, bases[0], key) }, &res.REST},
		{"REST hop", func(ctx context.Context) error { return restSubmitGet(ctx, client, bases[1], key) }, &res.hop},
		{"gRPC", grpcOp, &res.grpc},
	}
	// Warm every path (connections, prepared statements). Then measure the
	// paths in slices, in an order where every path follows every other
	// one equally often (balancedOrder). Whole phases one after the other
	// measured the order more than the paths: each inherited the
	// background work the previous one left (relaying and projecting its
	// tasks, checkpoints), so the path measured first was the slow one.
	// Interleaved, every path meets the same database; balanced, every
	// path inherits the same backlog. A plain rotation did not: it kept
	// the cyclic order, so REST always followed gRPC (the heavier
	// backlog) twice as often as gRPC followed it.
	for _, p := range phases {
		if _, _, err := closedLoop(ctx, o.Clients, time.Second, p.op); err != nil {
			return nil, err
		}
	}
	k := (run - 1) % len(phases)
	phases = append(phases[k:], phases[:k]...)
	res.first = phases[0].name
	pgData := filepath.Join(env.dir, "pg")
	type tally struct {
		ops          int
		elapsed      time.Duration
		lat          []time.Duration
		self, server time.Duration
	}
	tallies := make([]tally, len(phases))
	// Each path gets the same number of slices, whole rounds of the
	// balanced order (a path comes len(phases)-1 times a round), and in
	// all runs o.For.
	order := balancedOrder(len(phases))
	perRound := max(1, len(phases)-1)
	slices := (max(1, int(o.For/o.Slice)) + perRound - 1) / perRound * perRound
	for slice := range slices * len(phases) {
		j := order[slice%len(order)]
		self0, server0 := cpuClock(pgData)
		began := time.Now()
		_, lat, err := closedLoop(ctx, o.Clients, o.For/time.Duration(slices), phases[j].op)
		if err != nil {
			return nil, err
		}
		t := &tallies[j]
		t.elapsed += time.Since(began)
		self1, server1 := cpuClock(pgData)
		t.ops += len(lat)
		t.lat = append(t.lat, lat...)
		t.self, t.server = t.self+self1-self0, t.server+server1-server0
	}
	for i, p := range phases {
		t := tallies[i]
		n := time.Duration(max(t.ops, 1))
		*p.out = phaseResult{rate: float64(t.ops) / t.elapsed.Seconds(), p99: percentile(t.lat, 99), self: t.self / n, server: t.server / n}
	}
	return &res, nil
}

// balancedOrder is an order of slices of n paths, to be repeated, in
// which every path comes equally often and follows every other path
// exactly once: a closed walk through every ordered pair of distinct
// paths (an Eulerian circuit of the complete directed graph on n
// vertices, found by Hierholzer's algorithm). For 3 paths it is
// 0 1 0 2 1 2: 0 follows 1 and 2 (at the wrap), 1 follows 0 and 2, 2
// follows 0 and 1.
func balancedOrder(n int) []int {
	if n < 2 {
		return []int{0}
	}
	// next[v] is the next unused edge target from v, in ascending order.
	next := make([]int, n)
	unused := func(v int) (int, bool) {
		for next[v] < n {
			w := next[v]
			next[v]++
			if w != v {
				return w, true
			}
		}
		return 0, false
	}
	stack, circuit := []int{0}, []int{}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		if w, ok := unused(v); ok {
			stack = append(stack, w)
			continue
		}
		circuit = append(circuit, v)
		stack = stack[:len(stack)-1]
	}
	// The circuit closes on its start; as an order to repeat, the last
	// vertex is the first one's repetition.
	for i, j := 0, len(circuit)-1; i < j; i, j = i+1, j-1 {
		circuit[i], circuit[j] = circuit[j], circuit[i]
	}
	return circuit[:len(circuit)-1]
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
