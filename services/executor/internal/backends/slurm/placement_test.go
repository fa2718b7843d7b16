package slurm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/agent"
	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// Slurm picks the node; the task runs on that node's agent with the GPUs
// Slurm allocated, its output comes back, and the placeholder is
// cancelled once the outcome is in.
func TestPlacementRunsTheTaskOnTheNodeSlurmChose(t *testing.T) {
	w := newWorld(t, ModePlacement)
	w.startNodeAgents()
	w.start()
	// node-a has 2 GPUs, node-b 4: only node-b can take 3.
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Resources: map[string]string{"nvidia.com/gpu": "3", "memory": "200Mi", "cpu": "1"},
		Command: `echo "gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID"; echo "::progress::50 half"; sleep 1.5`})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	if job.Nodes != "node-b" {
		t.Fatalf("placeholder runs on %q, want node-b", job.Nodes)
	}
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetError() != "" {
		t.Fatalf("outcome exit %d error %q stderr %q", done.GetExitCode(), done.GetError(), done.GetStderr())
	}
	if want := "gpus=0,1,2 job=" + itoa(int(job.ID)) + "\n::progress::50 half\n"; done.GetStdout() != want {
		t.Fatalf("stdout %q, want %q", done.GetStdout(), want)
	}
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
	if !strings.Contains(strings.Join(w.progressMessages(id), "|"), "RUNNING on node-b") {
		t.Fatalf("progress %v does not say where it runs", w.progressMessages(id))
	}
}

// A cancel from the server stops the task on its node and removes the
// placeholder from Slurm's queue; nothing is reported for the attempt.
func TestPlacementCancelRemovesThePlaceholder(t *testing.T) {
	w := newWorld(t, ModePlacement)
	agents := w.startNodeAgents()
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "sleep", Args: []string{"300"}, Timeout: 600, GracePeriodSec: 1})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	leasetest.WaitFor(t, 30*time.Second, "the task started", func() bool { return len(w.fake.Calls("StartTask")) > 0 })
	w.fake.StopOnHeartbeat(id, "cancelled", 1)
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
	// The node's agent has the task, stopped.
	a := agents[job.Nodes]
	waitRunning(t, a, 0, "the task stopped on the node")
	if c := w.fake.Complete(id); c != nil {
		t.Fatalf("a cancelled attempt reported %v", c)
	}
}

// A task no running node can take waits in Slurm's queue: the task stays
// assigned, with Slurm's reason as its progress message; a cancel
// removes the job from the queue.
func TestPlacementPendingShowsSlurmsReason(t *testing.T) {
	w := newWorld(t, ModePlacement)
	w.startNodeAgents()
	w.start()
	// Only node-c, which is down, has 8 GPUs.
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "true", Timeout: 60, Resources: map[string]string{"nvidia.com/gpu": "8"}})[0]
	job := w.jobOf(id, "the placeholder pending", func(j Job) bool { return j.State == StatePending })
	leasetest.WaitFor(t, 30*time.Second, "the pending reason reported", func() bool {
		return strings.Contains(strings.Join(w.progressMessages(id), "|"), "PENDING (ReqNodeNotAvail")
	})
	if len(w.fake.Calls("StartTask")) != 0 {
		t.Fatal("a pending job started the task")
	}
	w.fake.StopOnHeartbeat(id, "cancelled", 0)
	leasetest.WaitFor(t, 30*time.Second, "the job leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// A backend stopped mid-job and started again follows the same job: one
// job in Slurm for the attempt, one outcome.
func TestPlacementRestartAdoptsTheJob(t *testing.T) {
	w := newWorld(t, ModePlacement)
	w.startNodeAgents()
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Command: `sleep 4; echo finished`})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	leasetest.WaitFor(t, 30*time.Second, "the task started", func() bool { return len(w.fake.Calls("StartTask")) > 0 })
	w.stop()
	w.start()
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetStdout() != "finished\n" {
		t.Fatalf("outcome exit %d stdout %q error %q", done.GetExitCode(), done.GetStdout(), done.GetError())
	}
	if n := len(w.fake.Calls("CompleteTask")); n != 1 {
		t.Fatalf("%d completions, want 1", n)
	}
	if got := w.sacctJobs(jobName(id)); len(got) != 1 || got[0] != itoa(int(job.ID)) {
		t.Fatalf("sacct has jobs %v for the task, want only %d", got, job.ID)
	}
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// A placeholder Slurm cancels on its own (an operator's scancel, as a
// preemption in Slurm would) stops the task on its node and ends the
// attempt as preempted by slurm, not failed: the server requeues the task
// without using a retry.
func TestPlacementCancelledInSlurmIsReportedPreempted(t *testing.T) {
	w := newWorld(t, ModePlacement)
	agents := w.startNodeAgents()
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "sleep", Args: []string{"300"}, Timeout: 600, GracePeriodSec: 1})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	a := agents[job.Nodes]
	waitRunning(t, a, 1, "the task running on the node")
	w.cluster.Run(t, "scancel", itoa(int(job.ID)))
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetPreemptedBy() != "slurm" || !strings.Contains(done.GetError(), "CANCELLED") ||
		!strings.Contains(done.GetError(), "preempted in Slurm; the task is requeued") {
		t.Fatalf("outcome preempted_by %q error %q, want preempted by slurm", done.GetPreemptedBy(), done.GetError())
	}
	waitRunning(t, a, 0, "the task stopped on the node")
}

// Someone on the node cancels the task through its agent's local API: the
// attempt ends cancelled, and with it the task, with no retry, as a cancel
// on a process agent's local API does (docs/api/agent-local.md); the
// placeholder leaves Slurm's queue.
func TestPlacementLocalCancelOnTheNodeEndsTheAttemptCancelled(t *testing.T) {
	w := newWorld(t, ModePlacement)
	agents := w.startNodeAgents()
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "sleep", Args: []string{"300"}, Timeout: 600, GracePeriodSec: 1})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	a := agents[job.Nodes]
	waitRunning(t, a, 1, "the task running on the node")
	node := &nodeAgent{node: job.Nodes, base: w.cfg.NodeAgents[job.Nodes], http: http.DefaultClient}
	local, err := node.find(context.Background(), localTaskName(w.fake.Attempt(id)))
	if err != nil || local == nil {
		t.Fatalf("the task on the node: %v, %v", local, err)
	}
	if _, err := a.Cancel(context.Background(), local.GetId(), nil); err != nil {
		t.Fatal(err)
	}
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if !done.GetCancelled() || done.GetPreemptedBy() != "" {
		t.Fatalf("outcome cancelled %v preempted_by %q error %q, want cancelled", done.GetCancelled(), done.GetPreemptedBy(), done.GetError())
	}
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
}

// With a lease renewed moments ago, the task goes to its node while
// StartTask is on its way: it runs there before the server has answered,
// and its outcome is reported only after the answer.
func TestPlacementHandsOffAlongsideStartTask(t *testing.T) {
	w := newWorld(t, ModePlacement)
	w.cfg.RPCTimeout = 2 * time.Minute // a held StartTask does not time out into a start without it
	agents := w.startNodeAgents()
	release := make(chan struct{})
	w.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "StartTask" {
			<-release
		}
		return nil
	})
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Command: `sleep 1; echo ran`})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	a := agents[job.Nodes]
	waitRunning(t, a, 1, "the task running on the node, StartTask unanswered")
	waitRunning(t, a, 0, "the task ended on the node")
	time.Sleep(500 * time.Millisecond) // several polls of the node's agent
	if c := w.fake.Complete(id); c != nil {
		t.Fatalf("the outcome %v was reported before StartTask was answered", c)
	}
	released := time.Now()
	close(release)
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetStdout() != "ran\n" {
		t.Fatalf("outcome exit %d stdout %q error %q", done.GetExitCode(), done.GetStdout(), done.GetError())
	}
	if calls := w.fake.Calls("CompleteTask"); len(calls) != 1 || calls[0].At.Before(released) {
		t.Fatalf("CompleteTask calls %v, want one after StartTask's answer at %s", calls, released)
	}
	if !strings.Contains(w.logs.String(), "alongside_hand_off=true") {
		t.Fatal("the start was not sent alongside the hand-off")
	}
}

// StartTask sent alongside the hand-off is refused (the task was
// cancelled meanwhile): the task handed to the node is stopped there, the
// placeholder is cancelled, and nothing is reported for the attempt.
func TestPlacementStartRefusedAlongsideStopsTheTaskOnTheNode(t *testing.T) {
	w := newWorld(t, ModePlacement)
	agents := w.startNodeAgents()
	w.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "StartTask" {
			time.Sleep(2 * time.Second) // answered after the hand-off
			return rpcerr.New(rpcerr.TaskImmutable, "task is cancelled")
		}
		return nil
	})
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "sleep", Args: []string{"300"}, Timeout: 600, GracePeriodSec: 1})[0]
	job := w.jobOf(id, "the placeholder running", func(j Job) bool { return j.State == StateRunning })
	a := agents[job.Nodes]
	waitRunning(t, a, 1, "the task running on the node before StartTask's answer")
	waitRunning(t, a, 0, "the task stopped on the node")
	leasetest.WaitFor(t, 30*time.Second, "the placeholder leaving the queue", func() bool { return !w.squeueHas(job.ID) })
	if c := w.fake.Complete(id); c != nil {
		t.Fatalf("a refused attempt reported %v", c)
	}
	if !strings.Contains(w.logs.String(), "attempt gone at start") {
		t.Fatal("the backend did not take the refusal as the attempt gone")
	}
}

// waitRunning waits until the node's agent runs n tasks.
func waitRunning(t *testing.T, a *agent.Agent, n int, what string) {
	t.Helper()
	leasetest.WaitFor(t, 30*time.Second, what, func() bool {
		st, err := a.Status(context.Background())
		return err == nil && st.Running == n
	})
}

// A placement backend cut off from the server stops the task on its node
// with the fence's kill grace, not the task's own 30 s, so the task is
// dead before the server may lease it again (docs/executor.md,
// "Fencing"); the attempt is reported fenced once the server answers.
func TestPlacementCutOffStopsTheTaskOnItsNodeBeforeTheServerMovesIt(t *testing.T) {
	w, id, pid := placeStubbornTask(t, stubbornLostAfter)

	cut := time.Now()
	cutOff(w.fake)
	leasetest.WaitFor(t, 20*time.Second, "the task killed", func() bool { return syscall.Kill(pid, 0) != nil })
	gone := time.Now()
	heard := w.fake.LastHeard(cut)
	if releasable := heard.Add(stubbornLostAfter); !gone.Before(releasable) {
		t.Fatalf("the task ran until %s after the server last heard from the backend; it could lease the task again after %s", gone.Sub(heard), stubbornLostAfter)
	}

	w.fake.SetFail(nil)
	done := w.fake.WaitComplete(t, id, 30*time.Second)
	if !strings.HasPrefix(done.GetError(), "fenced: ") || done.GetExitCode() != -1 {
		t.Fatalf("outcome exit %d error %q, want the attempt reported fenced", done.GetExitCode(), done.GetError())
	}
}

// A backend that dies or freezes stops nothing itself, so the task it
// handed to a node runs under the backend's fence there: each read of the
// task renews it to what is left of the backend's own, and once the
// backend is gone the node's agent stops the task by the moment the
// backend would have, before the server may lease it again. The backend
// back reports the attempt fenced.
func TestPlacementStoppedBackendHasItsTaskStoppedOnTheNodeBeforeTheServerMovesIt(t *testing.T) {
	w, id, pid := placeStubbornTask(t, stubbornLostAfter)

	stopped := time.Now()
	w.stop() // as dead: nothing of the backend runs, and its job stays
	leasetest.WaitFor(t, 20*time.Second, "the task killed", func() bool { return syscall.Kill(pid, 0) != nil })
	gone := time.Now()
	heard := w.fake.LastHeard(stopped)
	if releasable := heard.Add(stubbornLostAfter); !gone.Before(releasable) {
		t.Fatalf("the task ran until %s after the server last heard from the backend; it could lease the task again after %s", gone.Sub(heard), stubbornLostAfter)
	}

	w.start()
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetError() != fence.OwnerMessage {
		t.Fatalf("outcome exit %d error %q, want the attempt reported fenced on the node (%q)", done.GetExitCode(), done.GetError(), fence.OwnerMessage)
	}
}

// While the backend follows its task, its reads renew the task's fence on
// the node: the task runs to its end well past the fence it was handed
// over with.
func TestPlacementFollowedTaskRunsPastItsFence(t *testing.T) {
	w := newWorld(t, ModePlacement)
	w.cfg.AgentLostAfter = stubbornLostAfter // a fence of 2 s
	w.startNodeAgents()
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Command: `sleep 6; echo finished`})[0]
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetStdout() != "finished\n" {
		t.Fatalf("outcome exit %d stdout %q error %q, want the task run to its end", done.GetExitCode(), done.GetStdout(), done.GetError())
	}
}

// stubbornLostAfter is the server's dead-agent timeout of the fencing
// tests: a fence of 2 s, a kill grace of 0.5 s.
const stubbornLostAfter = 3 * time.Second

// placeStubbornTask runs a backend with lostAfter and the nodes' agents,
// and places a task that ignores SIGTERM and has a 30 s grace; it returns
// once the task runs on its node, with the task's pid.
func placeStubbornTask(t *testing.T, lostAfter time.Duration) (w *world, id string, pid int) {
	t.Helper()
	w = newWorld(t, ModePlacement)
	w.cfg.AgentLostAfter = lostAfter
	w.startNodeAgents()
	w.start()
	pidFile := filepath.Join(t.TempDir(), "pid")
	id = w.fake.Add(&taskv1.Task{Type: "script", Timeout: 600, GracePeriodSec: 30,
		Command: `trap '' TERM; echo $$ > "$1"; while :; do sleep 0.2; done`, Args: []string{pidFile}})[0]
	return w, id, waitPID(t, pidFile, 60*time.Second)
}

// A node's agent older than the backend has no renewal route and ignores
// the fence's parameters: its answer to a renewal is "not found", and the
// backend reads the task instead, unfenced, rather than fail it as lost.
func TestPlacementOnAnAgentWithoutFencesRunsUnfenced(t *testing.T) {
	w := newWorld(t, ModePlacement)
	w.cfg.AgentLostAfter = stubbornLostAfter // a fence of 2 s
	w.startNodeAgents()
	for node, addr := range w.cfg.NodeAgents {
		target, err := url.Parse(addr)
		if err != nil {
			t.Fatal(err)
		}
		proxy := httputil.NewSingleHostReverseProxy(target)
		old := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
			if strings.HasSuffix(req.URL.Path, "/fence") {
				rw.Header().Set("Content-Type", "application/json")
				rw.WriteHeader(http.StatusNotFound)
				_, _ = rw.Write([]byte(`{"code":30004,"message":"Not Found","data":null}`))
				return
			}
			req.URL.RawQuery = "" // unknown query parameters are ignored
			proxy.ServeHTTP(rw, req)
		}))
		t.Cleanup(old.Close)
		w.cfg.NodeAgents[node] = old.URL
	}
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Command: `sleep 4; echo finished`})[0]
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetStdout() != "finished\n" {
		t.Fatalf("outcome exit %d stdout %q error %q, want the task run to its end", done.GetExitCode(), done.GetStdout(), done.GetError())
	}
	if !strings.Contains(w.logs.String(), "does not renew fences") {
		t.Fatal("the backend did not say that the task runs unfenced")
	}
}
