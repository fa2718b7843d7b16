package slurme2e

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/slurmtest"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// envBackend holds a Slurm backend's configuration when the test binary
// runs as that backend (a process of its own, so a test can SIGKILL it).
const envBackend = "TASKMESH_SLURM_E2E_BACKEND"

// TestMain routes the test binary's re-executions (the node agents'
// shims, the Slurm backend), and lets the tests share one Slurm cluster
// and one Postgres server.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim" {
		os.Exit(executor.Shim(os.Args[3:]))
	}
	if cfg := os.Getenv(envBackend); cfg != "" {
		os.Exit(runBackend(cfg))
	}
	slurmtest.Enable()
	pgtest.Main(m)
}

func runBackend(raw string) int {
	var cfg executor.SlurmConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := executor.RunSlurm(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "slurm backend:", err)
		return 1
	}
	return 0
}

var backendSeq atomic.Int64

// world is a running Taskmesh, the shared Slurm cluster, a Taskmesh agent
// per Slurm node, and a Slurm backend process between them.
type world struct {
	t       *testing.T
	s       *stack.Stack
	dbURL   string
	dir     string
	cluster *slurmtest.Cluster
	cfg     executor.SlurmConfig
	// nodeAgents are the local API addresses of the node agents.
	nodeAgents map[string]string

	mu      sync.Mutex
	backend *exec.Cmd
	logFile string
}

// newWorld starts Taskmesh (no local agent) and the node agents; the
// backend starts with startBackend, after tweak adjusts its settings.
func newWorld(t *testing.T, mode string, tweak ...func(*executor.SlurmConfig)) *world {
	t.Helper()
	cluster := slurmtest.Shared(t)
	dir, err := os.MkdirTemp("", "tmslurme2e") // short: shims put sockets under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dbURL := pgtest.New(t).URL
	o := stack.Options{
		DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DatabaseURL: dbURL,
		Timing: scheduler.Timing{AgentLostAfter: 10 * time.Second, SweepInterval: 200 * time.Millisecond, PreemptAfter: time.Second},
	}
	s, err := stack.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, s: s, dir: dir, cluster: cluster, logFile: filepath.Join(dir, "backend.log"), dbURL: dbURL}
	t.Cleanup(s.Close)
	w.startNodeAgents()
	id := fmt.Sprintf("slurm-e2e-%d-%d", os.Getpid(), backendSeq.Add(1))
	_, token, err := s.Gateway.Credentials().CreateAgentToken(context.Background(), id, "", []string{"127.0.0.1/32"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobDir := "" // placement: placeholders run in /tmp
	if mode == "batch" {
		jobDir = filepath.Join(cluster.JobDir, id)
	}
	w.cfg = executor.SlurmConfig{
		AgentID: id, Server: s.GRPCAddr, Token: token, RESTEndpoint: "unix:" + cluster.Socket,
		Mode: mode, Partition: cluster.Partition, JobDir: jobDir, DefaultMemoryMB: 100, NodeAgents: w.nodeAgents,
		StateDir: filepath.Join(dir, "slurm-state"), PollInterval: 200 * time.Millisecond,
		ClaimWait: 2 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RenewInterval: time.Second,
	}
	if mode == "placement" {
		// Placeholders signal their start, as docs/slurm.md advises; the
		// backend package's tests cover starts seen by listings alone.
		w.cfg.StartSignalListen = "127.0.0.1:0"
	}
	for _, f := range tweak {
		f(&w.cfg)
	}
	t.Cleanup(func() {
		w.killBackend()
		if t.Failed() {
			raw, _ := os.ReadFile(w.logFile)
			t.Logf("backend log:\n%s", raw)
			out, _ := cluster.Output(context.Background(), "squeue", "-o", "%i %j %T %r %N %Q")
			t.Logf("squeue:\n%s", out)
		}
		// Whatever a failed test left in Slurm goes with it: the jobs whose
		// comment names this test's backend.
		out, _ := cluster.Output(context.Background(), "squeue", "-h", "-o", "%i %k")
		for _, line := range strings.Split(out, "\n") {
			if jobID, comment, ok := strings.Cut(line, " "); ok && strings.Contains(comment, "agent="+id+"&") {
				_, _ = cluster.Output(context.Background(), "scancel", jobID)
			}
		}
	})
	return w
}

// startNodeAgents runs a Taskmesh agent for every started Slurm node: its
// machine id is the node's name, it runs local tasks only, and its local
// API listens on loopback.
func (w *world) startNodeAgents() {
	w.t.Helper()
	w.nodeAgents = map[string]string{}
	for _, n := range w.cluster.Nodes {
		addr := freeAddr(w.t)
		cfg := executor.Config{AgentID: "agent-" + n.Name, MachineID: n.Name, Slots: 4, LocalAPIAddr: addr,
			DataDir: filepath.Join(w.dir, "agent-"+n.Name), OrphanGrace: 2 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- executor.Run(ctx, cfg) }()
		w.t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				w.t.Errorf("node agent %s: %v", n.Name, err)
			}
		})
		waitFor(w.t, 10*time.Second, "the agent of "+n.Name, func() bool {
			resp, err := http.Get("http://" + addr + "/api/v1/queue/status")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == http.StatusOK
		})
		w.nodeAgents[n.Name] = "http://" + addr
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startBackend runs the Slurm backend as a child process (again, after
// killBackend: a restart on the same state directory).
func (w *world) startBackend() {
	w.t.Helper()
	raw, err := json.Marshal(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	logf, err := os.OpenFile(w.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		w.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envBackend+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.backend = cmd
	w.mu.Unlock()
}

// killBackend SIGKILLs the backend: no cleanup of its own runs.
func (w *world) killBackend() {
	w.mu.Lock()
	cmd := w.backend
	w.backend = nil
	w.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// tenantKey creates a tenant of tier and returns an API key of it.
func (w *world) tenantKey(tenant, tier string) string {
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

func (w *world) standardKey() string { return w.tenantKey("acme", gateway.TierStandard) }

// call sends a REST request and decodes the JSON answer.
func (w *world) call(method, path, bearer string, body any) (int, map[string]any) {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, w.s.HTTPURL+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
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
	return resp.StatusCode, out
}

func (w *world) submit(key string, task map[string]any) string {
	w.t.Helper()
	code, body := w.call("POST", "/api/v1/tasks", key, task)
	if code != 200 {
		w.t.Fatalf("create: %d %v", code, body)
	}
	return body["id"].(string)
}

func (w *world) task(key, id string) map[string]any {
	w.t.Helper()
	code, body := w.call("GET", "/api/v1/tasks/"+id, key, nil)
	if code != 200 {
		w.t.Fatalf("get %s: %d %v", id, code, body)
	}
	return body
}

// waitStatus polls the task until its status is one of want.
func (w *world) waitStatus(key, id string, d time.Duration, want ...string) map[string]any {
	w.t.Helper()
	var t map[string]any
	waitFor(w.t, d, fmt.Sprintf("task %s to be %v", id, want), func() bool {
		t = w.task(key, id)
		for _, s := range want {
			if t["status"] == s {
				return true
			}
		}
		return false
	})
	return t
}

func (w *world) result(key, id string) map[string]any {
	w.t.Helper()
	code, body := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	if code != 200 {
		w.t.Fatalf("result %s: %d %v", id, code, body)
	}
	return body
}

// slurmJob is a job of a task as Slurm's tools list it.
type slurmJob struct {
	ID, State, Nodes string
}

// sacct lists every job Slurm accounted for under the task's job name,
// once slurmdbd has the record of each (slurmctld sends them on its own
// time) and none is still running.
func (w *world) sacct(taskID string, want int) []slurmJob {
	w.t.Helper()
	var jobs []slurmJob
	waitFor(w.t, 30*time.Second, fmt.Sprintf("%d finished jobs of task %s in sacct", want, taskID), func() bool {
		jobs = w.sacctNow(taskID)
		for _, j := range jobs {
			if j.State == "RUNNING" || j.State == "PENDING" {
				return false
			}
		}
		return len(jobs) >= want
	})
	return jobs
}

func (w *world) sacctNow(taskID string) []slurmJob {
	w.t.Helper()
	out := w.cluster.Run(w.t, "sacct", "-n", "-X", "-P", "--name", "tm-"+taskID, "-S", "now-1hour", "-o", "JobID,State,NodeList")
	var jobs []slurmJob
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Split(line, "|"); len(f) == 3 {
			jobs = append(jobs, slurmJob{ID: f[0], State: strings.Fields(f[1] + " ")[0], Nodes: f[2]})
		}
	}
	return jobs
}

// squeue lists the task's jobs Slurm still has queued or running.
func (w *world) squeue(taskID string) []slurmJob {
	w.t.Helper()
	out := w.cluster.Run(w.t, "squeue", "-h", "--name", "tm-"+taskID, "-o", "%i|%T|%N")
	var jobs []slurmJob
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Split(line, "|"); len(f) == 3 {
			jobs = append(jobs, slurmJob{ID: f[0], State: f[1], Nodes: f[2]})
		}
	}
	return jobs
}

// waitSqueue waits until the task's jobs in squeue satisfy cond.
func (w *world) waitSqueue(taskID, what string, cond func([]slurmJob) bool) []slurmJob {
	w.t.Helper()
	var jobs []slurmJob
	waitFor(w.t, 60*time.Second, what, func() bool {
		jobs = w.squeue(taskID)
		return cond(jobs)
	})
	return jobs
}

// localTasks lists the tasks a node's agent has run or runs.
func (w *world) localTasks(node string) []map[string]any {
	w.t.Helper()
	resp, err := http.Get(w.nodeAgents[node] + "/api/v1/tasks")
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Tasks []map[string]any `json:"tasks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		w.t.Fatal(err)
	}
	return body.Tasks
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// taskEvents lists the task's events from the scheduler's event store, in
// order, as names; TaskPreempted carries who preempted:
// "TaskLeased TaskStarted TaskPreempted(slurm) TaskRequeued …".
func (w *world) taskEvents(id string) string {
	w.t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, w.dbURL)
	if err != nil {
		w.t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT event_type, payload FROM `+scheduler.Schema+`.events WHERE aggregate_id = $1 ORDER BY version`, id)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		var payload []byte
		if err := rows.Scan(&name, &payload); err != nil {
			w.t.Fatal(err)
		}
		var e taskv1.TaskEvent
		if err := proto.Unmarshal(payload, &e); err != nil {
			w.t.Fatal(err)
		}
		if p := e.GetPreempted(); p != nil {
			name += "(" + p.GetPreemptedBy() + ")"
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return strings.Join(names, " ")
}
