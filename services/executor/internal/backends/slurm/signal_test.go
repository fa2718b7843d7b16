package slurm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/agent"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

// listingSwitch is the real slurmrestd client with its job listing
// turned off while down is set: a start the backend acts on then can
// only have come from the placeholder's signal (and slurmctld's answer
// about that one job).
type listingSwitch struct {
	*Client
	down atomic.Bool
	// hang makes a listing wait (until hang is cleared or its context
	// ends) instead of failing: no listing ends, so none wakes anyone.
	hang atomic.Bool
	// readDown makes reads of one job fail as well.
	readDown atomic.Bool
}

func (l *listingSwitch) Job(ctx context.Context, id int64) (Job, error) {
	if l.readDown.Load() {
		return Job{}, errors.New("job reads turned off by the test")
	}
	return l.Client.Job(ctx, id)
}

func (l *listingSwitch) Jobs(ctx context.Context) ([]Job, error) {
	for l.hang.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if l.down.Load() {
		return nil, errors.New("job listing turned off by the test")
	}
	return l.Client.Jobs(ctx)
}

func newSignalWorld(t *testing.T) (*world, *listingSwitch, map[string]*agent.Agent) {
	w := newWorld(t, ModePlacement)
	agents := w.startNodeAgents()
	w.cfg.StartSignalListen = "127.0.0.1:0"
	sw := &listingSwitch{Client: w.client}
	w.api = sw
	return w, sw, agents
}

// signal sends a start signal as a placeholder would, and returns the
// HTTP status.
func signal(t *testing.T, addr string, form url.Values) int {
	t.Helper()
	resp, err := http.PostForm("http://"+addr+signalPath, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The placeholder tells the backend it runs: with slurmctld's job
// listing unavailable, the task is started and handed to the node Slurm
// chose all the same; once the listing is back, the attempt completes
// through it as usual.
func TestPlacementStartSignalStartsWithoutAListing(t *testing.T) {
	w, sw, _ := newSignalWorld(t)
	w.start()
	// The listing goes down once adoption has read it: from here, only
	// the signal can show the start.
	leasetest.WaitFor(t, 30*time.Second, "the backend started", func() bool {
		return strings.Contains(w.logs.String(), "slurm backend started")
	})
	sw.down.Store(true)
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Resources: map[string]string{"nvidia.com/gpu": "3"},
		Command: `echo "gpus=$CUDA_VISIBLE_DEVICES"; sleep 1`})[0]
	leasetest.WaitFor(t, 60*time.Second, "the task started by the start signal", func() bool { return len(w.fake.Calls("StartTask")) > 0 })
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	if job.Nodes != "node-b" {
		t.Fatalf("placeholder runs on %q, want node-b", job.Nodes)
	}
	// The running message follows once the task is on its node.
	leasetest.WaitFor(t, 30*time.Second, "progress saying where it runs", func() bool {
		return strings.Contains(strings.Join(w.progressMessages(id), "|"), "RUNNING on node-b")
	})
	if !strings.Contains(w.logs.String(), "acted_on=signal") {
		t.Fatal("the start was not acted on by the signal, which names the node and the GPUs")
	}
	sw.down.Store(false)
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetStdout() != "gpus=0,1,2\n" {
		t.Fatalf("outcome exit %d stdout %q error %q", done.GetExitCode(), done.GetStdout(), done.GetError())
	}
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// A placement that runs is looked at on its node once a PollInterval
// whether or not a listing comes: with every listing hanging, its end is
// still seen, the task completed and the placeholder released.
func TestPlacementRunningIsLookedAtWithoutListings(t *testing.T) {
	w, sw, _ := newSignalWorld(t)
	// No renewal within the test either: nothing but the look wakes the
	// attempt.
	w.cfg.RenewInterval = 30 * time.Second
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Command: `sleep 2; echo looked-at`})[0]
	leasetest.WaitFor(t, 60*time.Second, "the task on its node", func() bool {
		return strings.Contains(strings.Join(w.progressMessages(id), "|"), "RUNNING on ")
	})
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	// From here no listing ends (the watcher's own timeout is 30 s): the
	// end can only be seen by looking at the node.
	sw.hang.Store(true)
	defer sw.hang.Store(false)
	done := w.fake.WaitComplete(t, id, 20*time.Second)
	if done.GetExitCode() != 0 || done.GetStdout() != "looked-at\n" {
		t.Fatalf("outcome exit %d stdout %q error %q", done.GetExitCode(), done.GetStdout(), done.GetError())
	}
	leasetest.WaitFor(t, 20*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// Signals are refused unless they carry the attempt's token; one that
// carries it starts nothing slurmctld does not run.
func TestPlacementStartSignalRefusesForgedSignals(t *testing.T) {
	w, sw, _ := newSignalWorld(t)
	w.start()
	addr := w.backend.StartSignalAddr()
	id, job := addPendingTask(w, &taskv1.Task{Type: "shell", Command: "true", Timeout: 60})
	attempt := w.fake.Attempt(id)
	jobID := strconv.FormatInt(job.ID, 10)
	sw.down.Store(true) // no listing can start anything meanwhile

	// The token a holder of the backend's key would make.
	key, err := os.ReadFile(filepath.Join(w.cfg.StateDir, signalKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	valid := signalToken(key, attempt)

	for _, tc := range []struct {
		name string
		form url.Values
		want int
	}{
		{"forged token", url.Values{"attempt": {attempt}, "job": {jobID}, "node": {"node-a"}, "token": {strings.Repeat("0", 64)}}, http.StatusForbidden},
		{"another attempt's token", url.Values{"attempt": {attempt}, "job": {jobID}, "token": {signalToken(key, "other-attempt")}}, http.StatusForbidden},
		{"no token", url.Values{"attempt": {attempt}, "job": {jobID}}, http.StatusBadRequest},
		{"job not a number", url.Values{"attempt": {attempt}, "job": {"1;reboot"}, "token": {valid}}, http.StatusBadRequest},
		{"node not a node name", url.Values{"attempt": {attempt}, "job": {jobID}, "node": {"node-a;reboot"}, "token": {valid}}, http.StatusBadRequest},
		{"node list not a node list", url.Values{"attempt": {attempt}, "job": {jobID}, "node": {"node-a"}, "nodes": {"node-$(id)"}, "token": {valid}}, http.StatusBadRequest},
		{"gpus not indexes", url.Values{"attempt": {attempt}, "job": {jobID}, "node": {"node-a"}, "gpus": {"0 1"}, "token": {valid}}, http.StatusBadRequest},
		{"attempt not held", url.Values{"attempt": {"other-attempt"}, "job": {jobID}, "token": {signalToken(key, "other-attempt")}}, http.StatusNotFound},
	} {
		if got := signal(t, addr, tc.form); got != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, got, tc.want)
		}
	}
	if resp, err := http.Get("http://" + addr + signalPath); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %v %v, want 405", resp, err)
	}

	// A valid token for a job slurmctld holds pending, in a signal that
	// does not say where the job runs, is a hint: the backend asks
	// slurmctld, which says PENDING, and starts nothing.
	if got := signal(t, addr, url.Values{"attempt": {attempt}, "job": {jobID}, "token": {valid}}); got != http.StatusAccepted {
		t.Fatalf("valid signal: HTTP %d, want 202", got)
	}
	leasetest.WaitFor(t, 30*time.Second, "the backend checking the job with slurmctld", func() bool {
		return strings.Contains(w.logs.String(), "start signal for a job slurmctld does not run")
	})
	if n := len(w.fake.Calls("StartTask")); n != 0 {
		t.Fatalf("%d StartTask calls for a pending job", n)
	}
	sw.down.Store(false)
	w.fake.StopOnHeartbeat(id, "cancelled", 0)
	leasetest.WaitFor(t, 30*time.Second, "the job leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// A signal with the attempt's token that slurmctld contradicts — it names
// a node while slurmctld holds the job pending — hands the task to that
// node (a valid signal is acted on at once); the read of the job that
// goes alongside, asked again while slurmctld does not answer, stops it
// there and fails the attempt with the reason; the placeholder is
// cancelled.
func TestPlacementStartSignalContradictedBySlurmStopsTheTask(t *testing.T) {
	w, sw, agents := newSignalWorld(t)
	w.start()
	addr := w.backend.StartSignalAddr()
	id, job := addPendingTask(w, &taskv1.Task{Type: "script", Command: "sleep 60", Timeout: 120})
	sw.down.Store(true) // no listing can start or end anything meanwhile
	key, err := os.ReadFile(filepath.Join(w.cfg.StateDir, signalKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	attempt := w.fake.Attempt(id)
	form := url.Values{"attempt": {attempt}, "job": {strconv.FormatInt(job.ID, 10)}, "node": {"node-a"},
		"nodes": {"node-a"}, "gpus": {"0,1,2,3,4,5,6,7"}, "token": {signalToken(key, attempt)}}
	sw.readDown.Store(true)
	if got := signal(t, addr, form); got != http.StatusAccepted {
		t.Fatalf("signal: HTTP %d, want 202", got)
	}
	waitRunning(t, agents["node-a"], 1, "the task running on node-a")
	leasetest.WaitFor(t, 30*time.Second, "the unanswered read asked again", func() bool {
		return strings.Count(w.logs.String(), "asked again at the next look") >= 2
	})
	if c := w.fake.Complete(id); c != nil {
		t.Fatalf("the attempt ended (%v) before slurmctld answered", c)
	}
	sw.readDown.Store(false)
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != -1 || !strings.Contains(done.GetError(), "a start signal named node node-a") ||
		!strings.Contains(done.GetError(), "slurmctld has the job PENDING") {
		t.Fatalf("outcome exit %d error %q, want the contradiction", done.GetExitCode(), done.GetError())
	}
	if n := len(w.fake.Calls("StartTask")); n != 1 {
		t.Fatalf("%d StartTask calls, want 1 (the signal was acted on)", n)
	}
	waitRunning(t, agents["node-a"], 0, "the task stopped on node-a")
	sw.down.Store(false)
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// What a signal says becomes the job the hand-off uses only when it is
// enough for the task: a node, and the GPUs' indexes for a GPU task.
func TestStartReportJob(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report startReport
		gpus   int
		ok     bool
		nodes  string
		first  string
		gpuIdx string
	}{
		{"node only, no GPUs asked", startReport{jobID: 7, node: "node-a"}, 0, true, "node-a", "node-a", ""},
		{"node list", startReport{jobID: 7, node: "node-a", nodes: "node-[a-b]"}, 0, true, "node-[a-b]", "node-a", ""},
		{"GPUs", startReport{jobID: 7, node: "node-b", gpus: "0-2,5"}, 4, true, "node-b", "node-b", "0,1,2,5"},
		{"GPUs asked, none said", startReport{jobID: 7, node: "node-b"}, 2, false, "", "", ""},
		{"no node", startReport{jobID: 7}, 0, false, "", "", ""},
	} {
		j, ok := tc.report.job(tc.gpus)
		if ok != tc.ok {
			t.Fatalf("%s: ok %v, want %v", tc.name, ok, tc.ok)
		}
		if !ok {
			continue
		}
		if j.ID != 7 || j.State != StateRunning || j.Nodes != tc.nodes || j.FirstNode() != tc.first || j.GPUIndexes() != tc.gpuIdx {
			t.Fatalf("%s: job %+v (first node %q, GPUs %q)", tc.name, j, j.FirstNode(), j.GPUIndexes())
		}
	}
}

// addPendingTask adds t asking for 8 GPUs, which only node-c, a node that
// is down, has: its placeholder pends. It returns the task's id and job.
func addPendingTask(w *world, t *taskv1.Task) (string, Job) {
	t.Resources = map[string]string{"nvidia.com/gpu": "8"}
	id := w.fake.Add(t)[0]
	return id, w.jobOf(id, "the placeholder pending", func(j Job) bool { return j.State == StatePending })
}

func signalToken(key []byte, attemptID string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("taskmesh slurm start\x00" + attemptID))
	return hex.EncodeToString(mac.Sum(nil))
}

// The signalling placeholder, run by bash as slurmd would run it, sends
// Slurm's view of its allocation to the backend and then holds it (sleep,
// stubbed here); with the backend unreachable it holds it all the same.
func TestSignallingPlaceholderScript(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "placeholder")
	if err := os.WriteFile(script, []byte(signallingPlaceholderScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// sleep stands in for `sleep infinity`: it records that it was
	// reached, and with what.
	if err := os.WriteFile(filepath.Join(dir, "sleep"), []byte("#!/bin/sh\necho \"$@\" > \"$SLEPT\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := newStartSignal("127.0.0.1:0", "", dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan startReport, 1)
	s.nudge = func(attemptID string, r startReport) bool {
		if attemptID == "att-1" {
			got <- r
		}
		return true
	}
	go s.serve()
	defer s.close()
	run := func(env map[string]string) {
		t.Helper()
		cmd := exec.Command(script)
		cmd.Env = []string{"PATH=" + dir, "SLEPT=" + filepath.Join(dir, "slept"), "SLURM_JOB_ID=42",
			"SLURMD_NODENAME=node-a", "SLURM_JOB_NODELIST=node-[a-b]", "SLURM_JOB_GPUS=0,1"}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
			t.Fatalf("placeholder: %v, output %q", err, out)
		}
		if slept, err := os.ReadFile(filepath.Join(dir, "slept")); err != nil || string(slept) != "infinity\n" {
			t.Fatalf("the placeholder did not hold its allocation: %q %v", slept, err)
		}
		os.Remove(filepath.Join(dir, "slept"))
	}
	run(s.env("att-1"))
	select {
	case r := <-got:
		if r.received.IsZero() {
			t.Errorf("the signal has no time it was received")
		}
		r.received = time.Time{}
		if r != (startReport{jobID: 42, node: "node-a", nodes: "node-[a-b]", gpus: "0,1"}) {
			t.Fatalf("signal said %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no start signal")
	}
	// Nobody listens at the address: the placeholder still holds.
	env := s.env("att-1")
	s.close()
	run(env)
	select {
	case r := <-got:
		t.Fatalf("a signal arrived after the listener closed: %+v", r)
	default:
	}
}
