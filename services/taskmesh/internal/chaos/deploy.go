package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// deployment is Taskmesh as separate OS processes on loopback addresses:
// Postgres, the broker, Redis, two gateways, two schedulers, two quota
// services, the consumers service and three agents behind the driver's
// proxies.
type deployment struct {
	cfg        Config
	dir        string
	pg         *pg.LocalServer
	pgBin      string
	dbURL      string
	brokerAddr string
	procs      []*proc // every service process, broker and Redis included
	exits      exitLog // those of procs that ended on their own
	agents     []*proc
	proxies    []*proxy
	gatewayURL []string // REST base URLs
	gatewayRPC []string // gRPC front doors
	// gatewayHTTP and gatewayGRPC are the gateways' addresses, picked
	// before the schedulers start: the object store's links name the
	// first gateway, which serves /objects.
	gatewayHTTP, gatewayGRPC []string
	// objects is the filesystem object store the schedulers and the
	// gateways share (pipeline inputs, stage outputs and logs).
	objects  []string
	apiKey   string
	adminKey string
	// witnessDir holds the stubborn tasks' locks and overlap records,
	// one directory for every agent: all run on this machine, and a
	// task's runs meet there whichever agent runs them.
	witnessDir string
}

// pipelineStageRetries and pipelineStageRetryDelay: a stage task whose
// agent is lost, cut off or fenced is retried like any task, instead of
// failing its job. On an overloaded machine a stage can be fenced on
// attempt after attempt (its agent unanswered past the fence) while the
// faults last; the retries must outlast that stretch, yet end within the
// drain: with the task default of 60 s between them, three retries did
// not (a job counted as lost, ending later), and three retries 5 s apart
// were all used up inside it (a job failed). Eight, 10 s apart, span
// about 80 s.
const (
	pipelineStageRetries    = 8
	pipelineStageRetryDelay = "10s"
)

// pipelinePools are the labels that let every agent run every stage of a
// conversion job (docs/api/pipeline.md, "Pools and caps").
const pipelinePools = "pool:onnx,pool:bie,pool:nef"

// Kinds of process the fault driver may kill.
const (
	kindGateway   = "gateway"
	kindScheduler = "scheduler"
	kindQuota     = "quota"
	kindConsumers = "consumers"
	kindAgent     = "agent"
	kindBroker    = "broker"
	kindRedis     = "redis"
)

// Timing of the deployment under test: agents heartbeat often and are
// declared lost soon, so the faults' consequences (leases released,
// tasks retried elsewhere) happen within a short run.
const (
	agentLostAfter    = 4 * time.Second
	heartbeatInterval = 500 * time.Millisecond
	// agentSlots: a third of the load sleeps a second or two, so at 50
	// requests a second the three agents would hold about 30 tasks at
	// once, and the stubborn tasks up to 8 more. On a busy 2-core machine
	// all 48 are held (docs/chaos.md); more slots did not serve more
	// there, the machine's CPU being the bound.
	agentSlots = 16
)

func (d *deployment) start(ctx context.Context) error {
	for _, sub := range []string{"logs", "kafka", "secrets", "witness"} {
		if err := os.MkdirAll(filepath.Join(d.dir, sub), 0o755); err != nil {
			return err
		}
	}
	// Absolute: the tasks run in work directories of their own.
	witness, err := filepath.Abs(filepath.Join(d.dir, "witness"))
	if err != nil {
		return err
	}
	d.witnessDir = witness
	if err := d.startPostgres(ctx); err != nil {
		return err
	}
	token, err := d.secret("internal-token", 32)
	if err != nil {
		return err
	}
	webhookKey, err := d.secret("webhook-key", 32)
	if err != nil {
		return err
	}
	if err := d.startInfra(ctx); err != nil {
		return err
	}
	common := []string{"--database-url", d.dbURL, "--kafka-brokers", d.brokerAddr, "--internal-token-file", token}
	if err := d.prepareObjects(); err != nil {
		return err
	}
	quotas, err := d.startServices(ctx, kindQuota, []string{"127.0.0.6", "127.0.0.7"}, func(addr string, _ int) []string {
		return append([]string{"quota", "--listen", addr}, common...)
	})
	if err != nil {
		return err
	}
	scheds, err := d.startServices(ctx, kindScheduler, []string{"127.0.0.4", "127.0.0.5"}, func(addr string, i int) []string {
		args := []string{"scheduler", "--listen", addr, "--quota", quotas[i], "--agent-lost-after", agentLostAfter.String(),
			"--objects", "fs", "--pipeline", "--pipeline-stage-retries", fmt.Sprint(pipelineStageRetries),
			"--pipeline-stage-retry-delay", pipelineStageRetryDelay}
		return append(append(args, d.objects...), common...)
	})
	if err != nil {
		return err
	}
	cons, err := d.startServices(ctx, kindConsumers, []string{"127.0.0.8"}, func(addr string, _ int) []string {
		return append([]string{"consumers", "--listen", addr, "--webhook-key-file", webhookKey}, common...)
	})
	if err != nil {
		return err
	}
	if err := d.startGateways(ctx, common, scheds, quotas, cons[0]); err != nil {
		return err
	}
	if err := d.bootstrap(ctx); err != nil {
		return err
	}
	return d.startAgents(ctx)
}

// startPostgres runs Postgres from the system's binaries on its own data
// directory. Commits are synchronous: an immediate shutdown must lose
// nothing a client was told is stored (fsync stays off: the OS, which
// keeps what was written, does not crash here).
func (d *deployment) startPostgres(ctx context.Context) error {
	bin, err := pg.FindBinDir()
	if err != nil {
		return err
	}
	d.pgBin = bin
	d.pg = &pg.LocalServer{DataDir: filepath.Join(d.dir, "pg"), LogPath: logPath(d.dir, "postgres"),
		Params: pgstats.Params(d.cfg.PGStats, map[string]string{"max_connections": "400", "synchronous_commit": "on"})}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := d.pg.Start(sctx); err != nil {
		return fmt.Errorf("start Postgres: %w", err)
	}
	d.dbURL = d.pg.URL("postgres")
	return nil
}

// restartPostgres stops Postgres the way a crash would (pg_ctl stop -m
// immediate: no checkpoint, every backend gone at once) and starts it
// again on the same port, which runs crash recovery.
func (d *deployment) restartPostgres(ctx context.Context) error {
	args := []string{filepath.Join(d.pgBin, "pg_ctl"), "-D", d.pg.DataDir, "stop", "-m", "immediate", "-w"}
	if os.Geteuid() == 0 {
		// postgres refuses root; the server runs as the postgres user.
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w: %s", err, out)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		err := d.pg.Start(sctx)
		if err == nil {
			return nil
		}
		// The postmaster may not be reaped yet; Start says so and asks to
		// try again shortly.
		select {
		case <-sctx.Done():
			return fmt.Errorf("start Postgres again: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startInfra runs the broker (persisting to its data directory) and Redis.
func (d *deployment) startInfra(ctx context.Context) error {
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		return err
	}
	d.brokerAddr = addr
	_, port, _ := strings.Cut(addr, ":")
	broker := &proc{name: "broker", kind: kindBroker, path: d.cfg.Binary,
		args:  []string{"broker", "--data-dir", filepath.Join(d.dir, "kafka"), "--port", port, "--partitions", "8"},
		log:   logPath(d.dir, "broker"),
		ready: tcpReady(addr)}
	redisAddr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		return err
	}
	_, rport, _ := strings.Cut(redisAddr, ":")
	redis := &proc{name: "redis", kind: kindRedis, path: d.cfg.RedisServer,
		args:  []string{"--bind", "127.0.0.1", "--port", rport, "--save", "", "--appendonly", "no", "--dir", d.dir},
		log:   logPath(d.dir, "redis"),
		ready: tcpReady(redisAddr)}
	for _, p := range []*proc{broker, redis} {
		if err := d.launch(ctx, p); err != nil {
			return err
		}
	}
	d.cfg.redisURL = "redis://" + redisAddr + "/0"
	return nil
}

// startServices starts one process of kind per host, one after the other
// (the first migrates the schema), and returns their addresses.
func (d *deployment) startServices(ctx context.Context, kind string, hosts []string, args func(addr string, i int) []string) ([]string, error) {
	var addrs []string
	for i, host := range hosts {
		addr, err := freeport.Addr(host)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%s-%d", kind, i+1)
		p := &proc{name: name, kind: kind, path: d.cfg.Binary, args: args(addr, i), log: logPath(d.dir, name), ready: tcpReady(addr)}
		if err := d.launch(ctx, p); err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// prepareObjects picks the gateways' addresses and makes the filesystem
// object store every scheduler and gateway shares: one directory, one
// URL-signing secret, links to the first gateway (a stage worker retries
// its transfers while that gateway restarts).
func (d *deployment) prepareObjects() error {
	for _, host := range []string{"127.0.0.2", "127.0.0.3"} {
		httpAddr, err := freeport.Addr(host)
		if err != nil {
			return err
		}
		grpcAddr, err := freeport.Addr(host)
		if err != nil {
			return err
		}
		d.gatewayHTTP, d.gatewayGRPC = append(d.gatewayHTTP, httpAddr), append(d.gatewayGRPC, grpcAddr)
	}
	root := filepath.Join(d.dir, "objects")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	secret, err := d.secret("objects-secret", 32)
	if err != nil {
		return err
	}
	d.objects = []string{"--objects-fs-root", root, "--objects-fs-secret-file", secret,
		"--objects-fs-base-url", "http://" + d.gatewayHTTP[0] + "/objects"}
	return nil
}

// startGateways starts two gateways, each in front of its own scheduler
// and quota service, sharing the rate limits through Redis.
func (d *deployment) startGateways(ctx context.Context, common, scheds, quotas []string, consumers string) error {
	adminKey := filepath.Join(d.dir, "secrets", "admin-key")
	for i := range d.gatewayHTTP {
		httpAddr, grpcAddr := d.gatewayHTTP[i], d.gatewayGRPC[i]
		name := fmt.Sprintf("gateway-%d", i+1)
		args := append(append([]string{"gateway", "--http", httpAddr, "--grpc", grpcAddr, "--scheduler", scheds[i], "--quota", quotas[i],
			"--consumers", consumers, "--admin-key-file", adminKey, "--redis-url", d.cfg.redisURL,
			"--standard-rpm", "0", "--standard-tpm", "0", "--no-console"}, d.objects...), common...)
		url := "http://" + httpAddr
		p := &proc{name: name, kind: kindGateway, path: d.cfg.Binary, args: args, log: logPath(d.dir, name), ready: httpReady(url + "/healthz")}
		if err := d.launch(ctx, p); err != nil {
			return err
		}
		d.gatewayURL, d.gatewayRPC = append(d.gatewayURL, url), append(d.gatewayRPC, grpcAddr)
	}
	b, err := os.ReadFile(adminKey)
	if err != nil {
		return fmt.Errorf("the operator key: %w", err)
	}
	d.adminKey = strings.TrimSpace(string(b))
	return nil
}

func httpReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// chaosTenant is the tenant the load runs as.
const chaosTenant = "chaos"

// bootstrap creates the tenant, its API key and the agents' tokens through
// the admin API.
func (d *deployment) bootstrap(ctx context.Context) error {
	var tenant map[string]any
	if err := d.admin(ctx, "/api/v1/admin/tenants", map[string]any{"tenant_id": chaosTenant, "name": "Chaos", "tier": "standard"}, &tenant); err != nil {
		return fmt.Errorf("create the tenant: %w", err)
	}
	var key struct {
		Secret string `json:"secret"`
	}
	if err := d.admin(ctx, "/api/v1/admin/tenants/"+chaosTenant+"/api-keys", map[string]any{"name": "load"}, &key); err != nil {
		return fmt.Errorf("create the API key: %w", err)
	}
	d.apiKey = key.Secret
	if err := d.call(ctx, http.MethodPut, "/api/v1/cluster-queues/"+chaosQueue, chaosQueueSpec(2), nil); err != nil {
		return fmt.Errorf("define the ClusterQueue %s: %w", chaosQueue, err)
	}
	if err := d.call(ctx, http.MethodPut, "/api/v1/local-queues/"+chaosQueue, map[string]any{"cluster_queue": chaosQueue}, nil); err != nil {
		return fmt.Errorf("define the LocalQueue %s: %w", chaosQueue, err)
	}
	return nil
}

// chaosQueue is the ClusterQueue (and LocalQueue) of the load's own GPU
// work, whose quota the load changes while it runs.
const chaosQueue = "chaos-gpu"

// chaosQueueSpec is its definition with gpus GPUs, in no cohort.
func chaosQueueSpec(gpus int) map[string]any {
	return map[string]any{"resource_groups": []any{map[string]any{"covered_resources": []string{"nvidia.com/gpu"},
		"flavors": []any{map[string]any{"name": "default-flavor",
			"resources": []any{map[string]any{"name": "nvidia.com/gpu", "nominal_quota": fmt.Sprint(gpus)}}}}}}}
}

// admin POSTs body to an admin route with the operator key.
func (d *deployment) admin(ctx context.Context, path string, body, out any) error {
	return d.call(ctx, http.MethodPost, path, body, out)
}

// call sends body to an operator route with the operator key; out, if
// not nil, receives the answer.
func (d *deployment) call(ctx context.Context, method, path string, body, out any) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, d.gatewayURL[0]+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// startAgents registers three agents and starts each behind its proxy.
func (d *deployment) startAgents(ctx context.Context) error {
	for i, host := range []string{"127.0.0.9", "127.0.0.10", "127.0.0.11"} {
		id := fmt.Sprintf("agent-%d", i+1)
		var reg struct {
			Token string `json:"token"`
		}
		if err := d.admin(ctx, "/api/v1/admin/agents", map[string]any{"agent_id": id, "allowed_cidrs": []string{"127.0.0.0/8"}}, &reg); err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		}
		tokenFile := filepath.Join(d.dir, "secrets", id+".token")
		if err := os.WriteFile(tokenFile, []byte(reg.Token+"\n"), 0o600); err != nil {
			return err
		}
		addr, err := freeport.Addr(host)
		if err != nil {
			return err
		}
		px, err := newProxy(addr, d.gatewayRPC)
		if err != nil {
			return err
		}
		d.proxies = append(d.proxies, px)
		p := &proc{name: id, kind: kindAgent, path: d.cfg.Binary, log: logPath(d.dir, id),
			args: []string{"executor", "--agent-id", id, "--machine-id", "machine-" + id, "--server", px.addr(),
				"--token-file", tokenFile, "--data-dir", filepath.Join(d.dir, id), "--slots", fmt.Sprint(agentSlots), "--claim-wait", "2s",
				"--heartbeat-interval", heartbeatInterval.String(), "--agent-lost-after", agentLostAfter.String(),
				"--local-api", "", "--no-cgroups",
				"--labels", pipelinePools}}
		if err := d.launch(ctx, p); err != nil {
			return err
		}
		d.agents = append(d.agents, p)
	}
	return nil
}

// secret writes a random hex secret of n bytes to secrets/name (0600).
func (d *deployment) secret(name string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	path := filepath.Join(d.dir, "secrets", name)
	return path, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}

// launch starts p, waits until it serves and adds it to the processes the
// driver may kill, its exits watched.
func (d *deployment) launch(ctx context.Context, p *proc) error {
	p.exits = &d.exits
	if err := p.start(ctx); err != nil {
		return err
	}
	d.procs = append(d.procs, p)
	return nil
}

// ofKind lists the processes of kind.
func (d *deployment) ofKind(kind string) []*proc {
	var out []*proc
	for _, p := range d.procs {
		if p.kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// stop ends every process, the proxies and Postgres.
func (d *deployment) stop() error {
	for i := len(d.procs) - 1; i >= 0; i-- {
		d.procs[i].stopGroup()
	}
	for _, px := range d.proxies {
		px.close()
	}
	var err error
	if d.pg != nil {
		err = d.pg.Stop()
	}
	return err
}
