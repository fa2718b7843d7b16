package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gotel "go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fenceLostAfter is the server's dead-agent timeout in these tests: a
// fence of 4 s, SIGKILL 1 s after it, a second to spare.
const fenceLostAfter = 6 * time.Second

func fencing(c *Config) {
	c.AgentLostAfter, c.OrphanGrace = fenceLostAfter, time.Second
	c.GracePeriod = 30 * time.Second
}

// goneBy waits for the process group to be gone and returns when it was
// seen gone.
func goneBy(t *testing.T, pgid int, limit time.Duration) time.Time {
	t.Helper()
	var at time.Time
	leasetest.WaitFor(t, limit, "the task's processes gone", func() bool {
		if groupGone(pgid) {
			at = time.Now()
			return true
		}
		return false
	})
	return at
}

// runningStubborn starts a server task that ignores SIGTERM and has a 30 s
// grace, and waits until it runs; it returns its id and process group.
func runningStubborn(t *testing.T, h *harness) (string, int) {
	t.Helper()
	ready := filepath.Join(shortDir(t), "ready")
	task := script(trapTerm, ready)
	task.GracePeriodSec = 30
	id := h.fake.Add(task)[0]
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })
	row := h.waitRow(id, 5*time.Second, "pid journaled", func(r journal.Task) bool { return r.PID > 0 })
	return id, row.PID
}

// An agent cut off from the server keeps its connections to its shims,
// so no orphan rule stops its tasks; the server leases them elsewhere
// once it has not heard from the agent for its dead-agent timeout. The
// fence kills the task — which ignores SIGTERM and has a 30 s grace —
// before then, and the outcome says why once the server is back.
func TestCutOffAgentsTaskDiesBeforeTheServerMovesIt(t *testing.T) {
	meters := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(meters))
	was := gotel.GetMeterProvider()
	gotel.SetMeterProvider(provider)
	t.Cleanup(func() { gotel.SetMeterProvider(was) })
	h := newHarness(t, fencing).start()
	id, pgid := runningStubborn(t, h)

	unavailable := status.Error(codes.Unavailable, "cut off")
	cut := time.Now()
	h.fake.SetFail(func(string, proto.Message) error { return unavailable })
	gone := goneBy(t, pgid, 20*time.Second)
	if releasable := h.fake.LastHeard(cut).Add(fenceLostAfter); !gone.Before(releasable) {
		t.Fatalf("the task ran until %s after the server last heard from its agent; the server could lease it again after %s",
			gone.Sub(h.fake.LastHeard(cut)), fenceLostAfter)
	}

	h.fake.SetFail(nil)
	done := h.fake.WaitComplete(t, id, 20*time.Second)
	if done.GetExitCode() != 137 || !strings.Contains(done.GetError(), "fenced") {
		t.Errorf("outcome: exit %d, error %q; want SIGKILL (137) and fenced", done.GetExitCode(), done.GetError())
	}
	// The lapse is logged once, when the server answers a heartbeat or a
	// claim again (the outcome's report may come first), with how long it
	// was silent.
	const lapseLine = `msg="fence passed: the server answered none of this agent's calls for longer than the fence"`
	leasetest.WaitFor(t, 10*time.Second, "the lapse logged", func() bool { return strings.Contains(h.logs.String(), lapseLine) })
	time.Sleep(2 * heartbeatRetry) // room for a second line, which would be wrong
	if n := strings.Count(h.logs.String(), lapseLine); n != 1 {
		t.Errorf("%d lapse lines in the agent's log, want 1", n)
	}
	if !strings.Contains(h.logs.String(), " silent_for=") {
		t.Error("the lapse line says nothing of how long the server was silent")
	}
	// And counted, beside the heartbeats' durations by result.
	var rm metricdata.ResourceMetrics
	if err := meters.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	lapses, failed := int64(-1), uint64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name == "taskmesh.agent.fence_lapses" {
					lapses = 0
					for _, p := range d.DataPoints {
						lapses += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "taskmesh.agent.heartbeat_duration" {
					for _, p := range d.DataPoints {
						if v, _ := p.Attributes.Value("result"); v.AsString() == "error" {
							failed += p.Count
						}
					}
				}
			}
		}
	}
	if lapses != 1 || failed == 0 {
		t.Errorf("fence lapses counted %d (want 1), failed heartbeats timed %d (want some)", lapses, failed)
	}
}

// An agent that dies leaves its tasks to their shims. The orphan rule
// sends SIGTERM; the task ignores it, and its 30 s grace would outlast the
// server's dead-agent timeout. The fence kills it in time.
func TestDeadAgentsStubbornTaskDiesBeforeTheServerMovesIt(t *testing.T) {
	h := newHarness(t, fencing).start()
	_, pgid := runningStubborn(t, h)

	h.stop()
	died := time.Now()
	gone := goneBy(t, pgid, 20*time.Second)
	if releasable := h.fake.LastHeard(died).Add(fenceLostAfter); !gone.Before(releasable) {
		t.Fatalf("the task ran until %s after the server last heard from its agent; the server could lease it again after %s",
			gone.Sub(h.fake.LastHeard(died)), fenceLostAfter)
	}
}

// A restarted agent renews the fences of the tasks it finds: a task that
// outlives its agent by less than the fence runs on to its end, for as
// long as it takes.
func TestRestartedAgentRenewsTheFencesItFinds(t *testing.T) {
	fenceLen, _ := fence.Times(fenceLostAfter)
	h := newHarness(t, func(c *Config) {
		fencing(c)
		// The new agent must attach within the orphan grace, or the
		// shims stop the task first: on a loaded 2-core machine the
		// restart below took 1.7 s, past fencing's 1 s.
		c.OrphanGrace = 3 * time.Second
	}).start()
	ready := filepath.Join(shortDir(t), "ready")
	// Runs three fences long, so only renewals let it finish.
	task := script(`touch "$1"; sleep `+strings.TrimSuffix((3*fenceLen).String(), "s"), ready)
	id := h.fake.Add(task)[0]
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })

	h.stop()
	time.Sleep(200 * time.Millisecond)
	h.start()
	done := h.fake.WaitComplete(t, id, 6*fenceLen)
	if done.GetExitCode() != 0 || done.GetError() != "" {
		t.Fatalf("outcome: exit %d, error %q; want exit 0: the new agent did not renew the fence", done.GetExitCode(), done.GetError())
	}
}

// A heartbeat interval that would let the fences run out between two
// heartbeats is a configuration error.
func TestHeartbeatIntervalMustFitTheFence(t *testing.T) {
	_, err := Config{Settings: Settings{AgentID: "a", DataDir: t.TempDir(), Server: "127.0.0.1:1",
		HeartbeatInterval: 7 * time.Second}}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "heartbeat interval") {
		t.Fatalf("7 s heartbeats against a 15 s timeout: err = %v", err)
	}
	if _, err := (Config{Settings: Settings{AgentID: "a", DataDir: t.TempDir(), Server: "127.0.0.1:1"}}).withDefaults(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// After a lapse — here a restart, which does not know when the server
// last heard from the agent — a claim's answer renews the fence, but
// says nothing of the attempts the agent held before: the server may have
// leased them elsewhere meanwhile. A recovered attempt that never started
// waits for the stops of a heartbeat sent after the lapse, and one the
// server has moved on from never runs, even while heartbeats still fail
// and claims get through.
func TestAttemptHeldBeforeALapseWaitsForTheHeartbeatsStops(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		// A "shim" that never takes the run directory: the agent dies
		// with the attempt journaled but never started.
		c.ShimCommand = []string{"/bin/sh", "-c", "exec sleep 20", "stuck-shim"}
	})
	h.start()
	ran := filepath.Join(shortDir(t), "ran")
	id := h.fake.Add(script(`touch "$1"`, ran))[0]
	h.waitRow(id, 15*time.Second, "run directory journaled", func(r journal.Task) bool { return r.RunDir != "" })
	h.stop()

	// The server has moved on from the attempt, but the agent cannot hear
	// it: heartbeats fail, claims (which renew the fence) get through.
	h.fake.StopOnHeartbeat(id, reasonLeaseLost, 30)
	h.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "SendHeartbeat" {
			return status.Error(codes.Unavailable, "heartbeats cut")
		}
		return nil
	})
	h.cfg.ShimCommand = []string{os.Args[0], "executor", "shim"}
	restarted := time.Now()
	h.start()
	// A second claim is sent once the first was answered.
	leasetest.WaitFor(t, 10*time.Second, "a claim answered after the restart", func() bool {
		n := 0
		for _, c := range h.fake.Calls("ClaimTasks") {
			if c.At.After(restarted) {
				n++
			}
		}
		return n >= 2
	})
	time.Sleep(time.Second) // room for a wrong start after the claim's answer
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the attempt started on a claim's answer, before any heartbeat could say it was lost")
	}

	h.fake.SetFail(nil)
	final := h.waitFinal(id, 10*time.Second)
	if final.Status != journal.StatusFailed || !strings.Contains(final.Error, "lease lost") {
		t.Errorf("outcome: %s %q; want failed, lease lost", final.Status, final.Error)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the attempt ran although the server had moved on from it")
	}
}
