package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/buildtest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

const envAgent = "TASKMESH_E2E_AGENT"

// TestMain routes the test binary's re-executions: `executor shim …` for
// the shims of task processes, `pipeline-stage …` for pipeline stage
// tasks, and an agent process when envAgent holds its configuration.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim" {
		os.Exit(executor.Shim(os.Args[3:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "pipeline-stage" {
		os.Exit(executor.PipelineStage(os.Args[2:]))
	}
	if cfg := os.Getenv(envAgent); cfg != "" {
		os.Exit(runAgent(cfg))
	}
	pgtest.Main(m, pgtest.AfterTests(stageWorker.remove), pgtest.AfterTests(shimBinary.remove))
}

// The small binaries a deployment ships beside taskmesh, built once for
// the package and run as a deployment runs them:
//   - stageWorker, taskmesh-stage, the conversion pipeline's stage worker
//     (docs/decisions/0091-small-stage-worker-binary.md);
//   - shimBinary, taskmesh-shim, every agent's shim host
//     (docs/decisions/0075-small-shim-binary.md).
//
// Left to their defaults, both would be this test binary re-executed, whose
// start under the race detector costs about 0.17 s of CPU: twice per stage
// whose program is `{self}`, once per agent for its shim host, which then
// serves every task under the race detector's instrumentation. Their own
// code is tested with the race detector in their packages.
var (
	stageWorker = &builtOnce{pkg: "github.com/taskmesh/taskmesh/services/executor/cmd/taskmesh-stage", name: "taskmesh-stage"}
	shimBinary  = &builtOnce{pkg: "github.com/taskmesh/taskmesh/services/executor/cmd/taskmesh-shim", name: "taskmesh-shim"}
)

// builtOnce is a binary built the first time a test needs it and removed
// after the package's tests.
type builtOnce struct {
	pkg, name string
	once      sync.Once
	dir       string
	path      string
}

// get builds the binary if no test has yet and returns its path. A failed
// build fails the test that ran it and every later one.
func (b *builtOnce) get(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "tmbin")
		if err != nil {
			t.Fatal(err)
		}
		b.dir = dir
		bin := filepath.Join(dir, b.name)
		buildtest.Binary(t, b.pkg, bin, "")
		b.path = bin
	})
	if b.path == "" {
		t.Fatalf("%s did not build: see the first test that needed it", b.name)
	}
	return b.path
}

// remove deletes the binary, once no test runs it any more.
func (b *builtOnce) remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// agentSpec configures an agent child process.
type agentSpec struct {
	AgentID, Server, Token, DataDir string
	Slots                           int
	Labels                          []string
	LocalAPIAddr                    string // "" = no agent-local API
	ShimPath                        string // filled in: shimBinary
	// TokenFile, when set, holds the token instead (reread after a
	// rotation); SourceAddr is the address the agent connects from.
	TokenFile, SourceAddr string
}

// runAgent runs an agent until SIGTERM, which stops it as a service
// manager would (stopAgents).
func runAgent(raw string) int {
	var s agentSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := executor.Run(ctx, executor.Config{AgentID: s.AgentID, MachineID: "machine-" + s.AgentID, Slots: s.Slots,
		Labels: s.Labels,
		Server: s.Server, Token: s.Token, TokenFile: s.TokenFile, SourceAddr: s.SourceAddr, DataDir: s.DataDir,
		HeartbeatInterval: 300 * time.Millisecond, ClaimWait: 2 * time.Second,
		RenewInterval: time.Second, OrphanGrace: 2 * time.Second, LocalAPIAddr: s.LocalAPIAddr, ShimPath: s.ShimPath})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

// agentStopWait is how long a test's end waits for an agent to stop
// before killing it.
const agentStopWait = 10 * time.Second

// stopAgents stops the agent processes still running at a test's end with
// SIGTERM, all at once, and kills those still there after wait. An agent
// that stops removes the spare cgroups it kept for later tasks; a killed
// one leaves them to its next start with the same data directory, which a
// test's agent never has.
func stopAgents(procs []*exec.Cmd, wait time.Duration) {
	var running []*exec.Cmd
	for _, p := range procs {
		if p.ProcessState == nil && p.Process.Signal(syscall.SIGTERM) == nil {
			running = append(running, p)
		}
	}
	deadline := time.Now().Add(wait)
	for _, p := range running {
		exited := make(chan struct{})
		go func() { _ = p.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(time.Until(deadline)):
			_ = p.Process.Kill()
			<-exited
		}
	}
}

// world is a running Taskmesh plus helpers to act on it.
type world struct {
	t     *testing.T
	s     *stack.Stack
	dir   string
	mu    sync.Mutex
	procs []*exec.Cmd
}

func newWorld(t *testing.T, timing ...func(*scheduler.Timing)) *world {
	t.Helper()
	tm := worldTiming()
	for _, f := range timing {
		f(&tm)
	}
	return newWorldWith(t, stack.Options{Timing: tm})
}

// worldTiming is the scheduler's timing in these tests: sweeps run and
// preemptions act within a second. Agents are lost after the product's
// default time, which the agents' own fence assumes too: with 3 s, a
// loaded machine that held up an agent's heartbeats (every 300 ms) for 3 s
// had the server lease the task a test was about again, and the test
// failed on its agent_lost. A test about losing an agent shortens it with
// agentsLostFast.
func worldTiming() scheduler.Timing {
	return scheduler.Timing{AgentLostAfter: 15 * time.Second, SweepInterval: 200 * time.Millisecond, PreemptAfter: time.Second}
}

// agentsLostFast is the timing of a test that kills an agent and waits for
// the server to find it lost.
func agentsLostFast(tm *scheduler.Timing) { tm.AgentLostAfter = 3 * time.Second }

// worldLogTail bounds what a failed test prints of its world's log.
const worldLogTail = 32 << 10

// tail is the last n bytes of s, from a line's start.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// newWorldWith starts a world on o (directories, addresses and database
// are filled in).
func newWorldWith(t *testing.T, o stack.Options) *world {
	t.Helper()
	dir, err := os.MkdirTemp("", "tme2e") // short: shims put sockets under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if o.Logger == nil {
		// The services' warnings and errors (a relay or projection
		// retrying, a component stopping) are kept and shown when the
		// test fails: what a failure on a loaded machine needs to be
		// read without running it again. Registered before the stack's
		// own cleanup, this runs after it, with the shutdown's lines.
		logs := &logbuf.Buffer{}
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the world's service log (warnings and errors), last %d bytes:\n%s", worldLogTail, tail(logs.String(), worldLogTail))
			}
		})
	}
	o.DataDir, o.HTTPAddr, o.GRPCAddr, o.DatabaseURL = dir, "127.0.0.1:0", "127.0.0.1:0", pgtest.New(t).URL
	pipeline := scheduler.PipelineConfig{}
	if o.Pipeline != nil {
		pipeline = *o.Pipeline
	}
	if len(pipeline.Worker) == 0 {
		pipeline.Worker = []string{stageWorker.get(t), "pipeline-stage"}
	}
	o.Pipeline = &pipeline
	s, err := stack.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, s: s, dir: dir}
	t.Cleanup(func() {
		w.mu.Lock()
		stopAgents(w.procs, agentStopWait)
		w.mu.Unlock()
		s.Close()
	})
	// Registered after the stack's cleanup, this runs before it, while the
	// services still run: where a failed test's events stood.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the world's event pipeline when the test failed:\n%s", pipelineState(o.DatabaseURL))
		}
	})
	return w
}

// pipelineState reads, from a world's database, how far its scheduler's
// relay and projections have got and which transactions of the server
// were open: a list that does not show a task, or a wait for a state that
// never comes, is often an event that was not published or not applied.
func pipelineState(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "connect: " + err.Error()
	}
	defer conn.Close(ctx)
	var out strings.Builder
	queries := []struct{ what, sql string }{
		{"scheduler events (count, newest position)", `SELECT count(*)::text || ', newest at ' || coalesce((SELECT '(' || tx_id::text || ',' || id || ')'
			FROM scheduler.events ORDER BY tx_id DESC, id DESC LIMIT 1), '-') FROM scheduler.events`},
		{"scheduler events not relayed", `SELECT count(*)::text FROM scheduler.events e WHERE NOT EXISTS (
			SELECT 1 FROM scheduler.outbox_checkpoints c WHERE c.relay = 'scheduler' AND (e.tx_id, e.id) <= (c.tx_id, c.event_id))`},
		{"relay checkpoints", `SELECT coalesce(string_agg(relay || ' at (' || tx_id::text || ',' || event_id || ') ' || updated_at::text, '; '), '-') FROM scheduler.outbox_checkpoints`},
		{"projection offsets (sum over partitions)", `SELECT coalesce(string_agg(projection || ' ' || topic || ' ' || n || ' ' || at, '; '), '-')
			FROM (SELECT projection, topic, sum(next_offset)::text AS n, max(updated_at)::text AS at FROM scheduler.projection_offsets GROUP BY 1, 2) o`},
		{"open transactions of the server", `SELECT coalesce(string_agg(pid || ' ' || coalesce(datname, '-') || ' xid ' || coalesce(backend_xid::text, '-') ||
			' open ' || coalesce((now() - xact_start)::text, '-') || ' ' || coalesce(state, '-') || ': ' || left(query, 80), E'\n'), '-')
			FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (backend_xid IS NOT NULL OR state NOT IN ('idle'))`},
	}
	for _, q := range queries {
		var v string
		if err := conn.QueryRow(ctx, q.sql).Scan(&v); err != nil {
			v = "error: " + err.Error()
		}
		fmt.Fprintf(&out, "%s: %s\n", q.what, v)
	}
	return out.String()
}

// tenantKey creates a tenant and returns an API key of it.
func (w *world) tenantKey(tenant string) string {
	w.t.Helper()
	return w.tenantKeyOfTier(tenant, gateway.TierStandard)
}

// tenantKeyOfTier creates a tenant of tier and returns an API key of it.
func (w *world) tenantKeyOfTier(tenant, tier string) string {
	w.t.Helper()
	ctx := context.Background()
	c := w.s.Gateway.Credentials()
	if _, err := c.CreateTenant(ctx, tenant, tenant, tier); err != nil {
		w.t.Fatal(err)
	}
	_, key, err := c.CreateAPIKey(ctx, tenant, "e2e", nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return key
}

// agentToken makes a token for a shared-pool agent.
func (w *world) agentToken(id string) string {
	w.t.Helper()
	_, tok, err := w.s.Gateway.Credentials().CreateAgentToken(context.Background(), id, "", []string{"127.0.0.1/32"}, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return tok
}

// startAgent runs an agent child process; kill SIGKILLs it.
func (w *world) startAgent(id, token string, slots int) (kill func()) {
	w.t.Helper()
	return w.startAgentSpec(agentSpec{AgentID: id, Token: token, Slots: slots})
}

// startAgentSpec runs an agent child process of spec (server and data
// directory filled in); kill SIGKILLs it.
func (w *world) startAgentSpec(s agentSpec) (kill func()) {
	w.t.Helper()
	s.Server, s.DataDir, s.ShimPath = w.s.GRPCAddr, filepath.Join(w.dir, "agents", s.AgentID), shimBinary.get(w.t)
	spec, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAgent+"="+string(spec))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.procs = append(w.procs, cmd)
	w.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }) }
}

// call sends a REST request and decodes the JSON answer.
func (w *world) call(method, path, bearer string, body any) (int, map[string]any, http.Header) {
	w.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, w.s.HTTPURL+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(raw) > 0 && json.Unmarshal(raw, &out) != nil {
		out["_raw"] = string(raw)
	}
	return resp.StatusCode, out, resp.Header
}

func (w *world) submit(key string, task map[string]any) string {
	w.t.Helper()
	code, body, _ := w.call("POST", "/api/v1/tasks", key, task)
	if code != 200 {
		w.t.Fatalf("create: %d %v", code, body)
	}
	return body["id"].(string)
}

func (w *world) task(key, id string) map[string]any {
	w.t.Helper()
	code, body, _ := w.call("GET", "/api/v1/tasks/"+id, key, nil)
	if code != 200 {
		w.t.Fatalf("get %s: %d %v", id, code, body)
	}
	return body
}

// waitStatus polls the task until its status is one of want.
func (w *world) waitStatus(key, id string, d time.Duration, want ...string) map[string]any {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for {
		t := w.task(key, id)
		for _, s := range want {
			if t["status"] == s {
				return t
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("task %s is %v after %s, want %v (error %v)", id, t["status"], d, want, t["error"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// list is GET /api/v1/tasks as key; anything but 200 fails the test.
func (w *world) list(key string) []map[string]any {
	w.t.Helper()
	code, body, _ := w.call("GET", "/api/v1/tasks", key, nil)
	if code != 200 {
		w.t.Fatalf("list: %d %v", code, body)
	}
	raw, _ := body["tasks"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		m, _ := r.(map[string]any)
		out = append(out, m)
	}
	return out
}

// waitListed waits until key's list shows task id and returns that list.
// Lists come from a projection that catches up after the write: a check
// that something is absent from a list means little before this positive
// control.
func (w *world) waitListed(key, id string) []map[string]any {
	w.t.Helper()
	var tasks []map[string]any
	waitFor(w.t, 20*time.Second, "task "+id+" in its owner's list", func() bool {
		tasks = w.list(key)
		for _, t := range tasks {
			if t["id"] == id {
				return true
			}
		}
		return false
	})
	return tasks
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }
