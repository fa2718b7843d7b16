package slurm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/slurmtest"
	"github.com/taskmesh/taskmesh/services/executor/internal/agent"
	"github.com/taskmesh/taskmesh/services/executor/internal/leaseconn"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// TestMain lets the test binary act as the shim of the node agents' task
// processes, and shares one Slurm cluster among the package's tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim" {
		os.Exit(shim.Main(os.Args[3:]))
	}
	slurmtest.Main(m)
}

// agentSeq makes every test's backend a different agent, so that no test
// adopts another's jobs.
var agentSeq atomic.Int64

// world is a fake lease server, the shared Slurm cluster, and a backend
// between them (with the nodes' agents for placement).
type world struct {
	t       *testing.T
	cluster *slurmtest.Cluster
	fake    *leasetest.Fake
	client  *Client
	cfg     Config
	logs    *logbuf.Buffer
	stop    func()
	// api is what the backend calls (default client); backend is the
	// running one.
	api     slurmAPI
	backend *Backend
}

func newWorld(t *testing.T, mode Mode) *world {
	t.Helper()
	c := slurmtest.Shared(t)
	client, err := NewClient(context.Background(), ClientConfig{Endpoint: "unix:" + c.Socket})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, cluster: c, fake: leasetest.Start(t), client: client, logs: &logbuf.Buffer{}}
	w.cfg = Config{
		AgentID: fmt.Sprintf("slurm-test-%d-%d", os.Getpid(), agentSeq.Add(1)), ClaimWait: time.Second,
		PollInterval: 200 * time.Millisecond, RenewInterval: time.Second, HeartbeatInterval: 200 * time.Millisecond,
		StateDir: t.TempDir(),
		Job:      JobConfig{Mode: mode, Partition: c.Partition, JobDir: c.JobDir, DefaultMemoryMB: 100},
		Logger:   slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	t.Cleanup(func() {
		if w.stop != nil {
			w.stop()
		}
		// Whatever a failed test left in Slurm goes with it.
		for _, j := range w.ourJobs() {
			if !j.Final() {
				_ = client.Cancel(context.Background(), j.ID)
			}
		}
		if t.Failed() {
			t.Logf("backend log:\n%s", w.logs.String())
			t.Logf("squeue:\n%s", w.cluster.Run(t, "squeue", "-o", "%i %j %T %r %N"))
		}
	})
	return w
}

// startNodeAgents runs a Taskmesh agent for every started Slurm node, with
// the node's name as its machine id and its local API on loopback; the
// backend finds them by node.
func (w *world) startNodeAgents() map[string]*agent.Agent {
	w.t.Helper()
	agents := map[string]*agent.Agent{}
	w.cfg.NodeAgents = map[string]string{}
	for _, n := range w.cluster.Nodes {
		dir, err := os.MkdirTemp("", "tmslurmag")
		if err != nil {
			w.t.Fatal(err)
		}
		a, err := agent.New(context.Background(), agent.Config{Settings: agent.Settings{
			AgentID: "agent-" + n.Name, MachineID: n.Name, DataDir: dir, LocalAPIAddr: "127.0.0.1:0", Slots: 4,
			OrphanGrace: 2 * time.Second,
		}})
		if err != nil {
			w.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		w.t.Cleanup(func() {
			cancel()
			<-done
			os.RemoveAll(dir)
		})
		w.cfg.NodeAgents[n.Name] = "http://" + a.LocalAPIAddr()
		agents[n.Name] = a
	}
	return agents
}

// start runs a backend (again, after stop: a restart).
func (w *world) start() {
	w.t.Helper()
	conn, err := leaseconn.Dial(w.fake.Addr(), leaseconn.StaticToken("token"), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	api := w.api
	if api == nil {
		api = w.client
	}
	b, err := New(w.cfg, taskv1.NewLeaseServiceClient(conn), api)
	if err != nil {
		w.t.Fatal(err)
	}
	w.backend = b
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	w.stop = func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("backend run: %v", err)
		}
		conn.Close()
		w.stop = nil
	}
}

// ourJobs lists the jobs of this test's backend that slurmctld knows.
func (w *world) ourJobs() []Job {
	jobs, err := w.client.Jobs(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	var out []Job
	for _, j := range jobs {
		if ref, ok := parseComment(j.Comment); ok && ref.AgentID == w.cfg.AgentID {
			out = append(out, j)
		}
	}
	return out
}

// jobOf waits for the attempt's job and returns it in the state cond
// accepts.
func (w *world) jobOf(taskID string, what string, cond func(Job) bool) Job {
	w.t.Helper()
	var found Job
	leasetest.WaitFor(w.t, 60*time.Second, what, func() bool {
		attempt := w.fake.Attempt(taskID)
		for _, j := range w.ourJobs() {
			if ref, _ := parseComment(j.Comment); ref.AttemptID == attempt && cond(j) {
				found = j
				return true
			}
		}
		return false
	})
	return found
}

// squeueHas reports whether squeue lists the job.
func (w *world) squeueHas(id int64) bool {
	out := w.cluster.Run(w.t, "squeue", "-h", "-o", "%i")
	for _, f := range strings.Fields(out) {
		if f == strconv.FormatInt(id, 10) {
			return true
		}
	}
	return false
}

// sacctJobs lists the job ids sacct has under a job name.
func (w *world) sacctJobs(name string) []string {
	out := w.cluster.Run(w.t, "sacct", "-n", "-X", "-P", "--name", name, "-o", "JobID", "-S", "now-1hour")
	return strings.Fields(out)
}

func (w *world) progressMessages(taskID string) []string {
	var out []string
	for _, c := range w.fake.Calls("ReportTaskProgress") {
		req := c.Req.(*taskv1.ReportTaskProgressRequest)
		if req.GetTaskId() == taskID {
			out = append(out, fmt.Sprintf("%d %s", req.GetProgress(), req.GetMessage()))
		}
	}
	return out
}
