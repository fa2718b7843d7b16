package slurme2e

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ctl"
)

// Batch mode: the task is the Slurm job. It completes with its output
// (argv reaches the process untouched by any shell); a cancelled task's
// job leaves Slurm's queue.
func TestBatchTaskRunsThroughSlurmAndCancelRemovesItsJob(t *testing.T) {
	w := newWorld(t, "batch")
	w.startBackend()
	key := w.standardKey()
	id := w.submit(key, map[string]any{"name": "argv", "type": "shell", "command": "printf",
		"args": []string{"<%s>", "two words", "$(id)", "it's"}, "timeout": 120})
	done := w.waitStatus(key, id, 90*time.Second, "completed", "failed")
	if done["status"] != "completed" {
		t.Fatalf("task %v", done)
	}
	if out := w.result(key, id)["stdout"]; out != "<two words><$(id)><it's>" {
		t.Fatalf("stdout %q", out)
	}
	if jobs := w.sacct(id, 1); len(jobs) != 1 || jobs[0].State != "COMPLETED" {
		t.Fatalf("sacct %v, want one COMPLETED job", jobs)
	}

	id = w.submit(key, map[string]any{"name": "long", "type": "shell", "command": "sleep", "args": []string{"300"}, "timeout": 600})
	w.waitStatus(key, id, 60*time.Second, "running")
	if jobs := w.squeue(id); len(jobs) != 1 || jobs[0].State != "RUNNING" {
		t.Fatalf("squeue %v, want the running job", jobs)
	}
	if code, body := w.call("POST", "/api/v1/tasks/"+id+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel: %d %v", code, body)
	}
	w.waitSqueue(id, "the cancelled task's job to leave squeue", func(j []slurmJob) bool { return len(j) == 0 })
	if jobs := w.sacct(id, 1); len(jobs) != 1 || jobs[0].State != "CANCELLED" {
		t.Fatalf("sacct %v, want one CANCELLED job", jobs)
	}
	if got := w.task(key, id)["status"]; got != "cancelled" {
		t.Fatalf("task is %v", got)
	}
}

// A task past its timeout ends in Slurm as TIMEOUT and fails. Slurm counts
// time limits in minutes, and slurmrestd v0.0.38 cannot cut a running
// job's limit to nothing, so the timeout is a whole minute here: Slurm
// ends the job before the scheduler's own backstop (timeout + grace +
// 30 s) would.
func TestBatchTimeoutEndsAsTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "batch")
	w.startBackend()
	key := w.standardKey()
	id := w.submit(key, map[string]any{"name": "slow", "type": "shell", "command": "sleep", "args": []string{"600"},
		"timeout": 60, "max_retries": 0})
	done := w.waitStatus(key, id, 150*time.Second, "failed", "completed")
	if done["status"] != "failed" || !strings.Contains(done["error"].(string), "TIMEOUT") {
		t.Fatalf("task %v, want failed with TIMEOUT", done)
	}
	if jobs := w.sacct(id, 1); len(jobs) != 1 || jobs[0].State != "TIMEOUT" {
		t.Fatalf("sacct %v, want one TIMEOUT job", jobs)
	}
}

// A job Slurm cancels on its own (an operator's scancel, as a Slurm
// preemption would) ends its attempt as preempted by slurm, not failed:
// the task is requeued without using a retry, so even a task with
// max_retries 0 runs again as a new job and completes, retry_count 0.
func TestJobCancelledInSlurmRequeuesTheTask(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "batch")
	w.startBackend()
	key := w.standardKey()
	// The work directory (work/<task id>) outlives the attempt: the second
	// run finds the first one's mark and finishes.
	id := w.submit(key, map[string]any{"name": "requeued", "type": "script", "timeout": 120, "max_retries": 0, "retry_delay": 300,
		"command": `if [ -e mark ]; then echo again; else touch mark; sleep 300; fi`})
	first := w.waitStatus(key, id, 60*time.Second, "running")
	jobs := w.waitSqueue(id, "the task's job running", func(j []slurmJob) bool { return len(j) == 1 && j[0].State == "RUNNING" })
	w.cluster.Run(t, "scancel", jobs[0].ID)
	// retry_delay is 300 s: only a requeue (no retry) runs it again in time.
	done := w.waitStatus(key, id, 90*time.Second, "completed", "failed")
	if done["status"] != "completed" || done["retry_count"].(float64) != 0 || done["attempt_id"] == first["attempt_id"] {
		t.Fatalf("task %v, want completed by a second attempt after %v with retry_count 0", done, first["attempt_id"])
	}
	if out := w.result(key, id)["stdout"]; out != "again\n" {
		t.Fatalf("stdout %q", out)
	}
	all := w.sacct(id, 2)
	if len(all) != 2 || all[0].ID != jobs[0].ID || all[0].State != "CANCELLED" || all[1].State != "COMPLETED" {
		t.Fatalf("sacct %v, want the cancelled job %s and a completed one", all, jobs[0].ID)
	}
	// The first attempt ended preempted by slurm, then the task was requeued.
	events := w.taskEvents(id)
	if !strings.Contains(events, "TaskPreempted(slurm) TaskRequeued") || strings.Contains(events, "TaskFailed") {
		t.Fatalf("events %s, want TaskPreempted by slurm then TaskRequeued, and no failure", events)
	}
}

// Placement: a placeholder sized from the task's resources waits for
// Slurm, which picks the node; the task runs on that node's agent with
// the GPUs Slurm allocated; the placeholder goes when the task ends.
func TestPlacementTaskRunsOnTheNodeSlurmChose(t *testing.T) {
	w := newWorld(t, "placement")
	w.startBackend()
	key := w.tenantKey("bigco", gateway.TierPremium)
	// node-a has 2 GPUs and node-b 4: 3 fit only on node-b.
	id := w.submit(key, map[string]any{"name": "three-gpus", "type": "script", "timeout": 120,
		"resources": map[string]string{"nvidia.com/gpu": "3"},
		"command":   `echo "node=$SLURM_JOB_NODELIST gpus=$CUDA_VISIBLE_DEVICES"`})
	done := w.waitStatus(key, id, 90*time.Second, "completed", "failed")
	if done["status"] != "completed" {
		t.Fatalf("task %v", done)
	}
	if out := w.result(key, id)["stdout"]; out != "node=node-b gpus=0,1,2\n" {
		t.Fatalf("stdout %q", out)
	}
	if jobs := w.sacct(id, 1); len(jobs) != 1 || jobs[0].Nodes != "node-b" {
		t.Fatalf("sacct %v, want one placeholder on node-b", jobs)
	}
	w.waitSqueue(id, "the placeholder to leave squeue", func(j []slurmJob) bool { return len(j) == 0 })
	// node-b's agent ran it (its journal has it), node-a's did not.
	attempt := done["attempt_id"].(string)
	if !hasLocalTask(w.localTasks("node-b"), "tm-"+attempt, "completed") || hasLocalTask(w.localTasks("node-a"), "tm-"+attempt, "") {
		t.Fatalf("node-b ran %v; node-a ran %v", w.localTasks("node-b"), w.localTasks("node-a"))
	}
}

func hasLocalTask(tasks []map[string]any, name, status string) bool {
	for _, t := range tasks {
		if t["name"] == name && (status == "" || t["status"] == status) {
			return true
		}
	}
	return false
}

// A task asking for more GPUs than any running node has waits in Slurm's
// queue, assigned, and Slurm's reason is on the task and in `ctl tasks
// why`. (node-c, the only node with 8 GPUs, is down; a task no configured
// node could ever run is refused by Slurm and fails with its words.)
func TestPlacementOversizeTaskPendsWithSlurmsReason(t *testing.T) {
	w := newWorld(t, "placement")
	w.startBackend()
	key := w.tenantKey("bigco", gateway.TierPremium)
	id := w.submit(key, map[string]any{"name": "eight-gpus", "type": "shell", "command": "true", "timeout": 120,
		"resources": map[string]string{"nvidia.com/gpu": "8"}})
	var task map[string]any
	deadline := time.Now().Add(60 * time.Second)
	for {
		task = w.task(key, id)
		if msg, _ := task["progress_message"].(string); strings.Contains(msg, "PENDING (ReqNodeNotAvail, UnavailableNodes:node-c)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Slurm reason on the task after 60 s: %v", task)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if task["status"] != "assigned" {
		t.Fatalf("a task waiting in Slurm is %v, want assigned", task["status"])
	}
	var out, errOut bytes.Buffer
	args := []string{"tasks", "why", id, "--server", w.s.GRPCAddr, "--api-key", key}
	if code := ctl.Main(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("ctl tasks why: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "slurm:") || !strings.Contains(out.String(), "PENDING (ReqNodeNotAvail, UnavailableNodes:node-c)") {
		t.Fatalf("ctl tasks why:\n%s", out.String())
	}
	if code, body := w.call("POST", "/api/v1/tasks/"+id+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel: %d %v", code, body)
	}
	w.waitSqueue(id, "the cancelled placeholder to leave squeue", func(j []slurmJob) bool { return len(j) == 0 })

	id = w.submit(key, map[string]any{"name": "nine-gpus", "type": "shell", "command": "true", "timeout": 120, "max_retries": 0,
		"resources": map[string]string{"nvidia.com/gpu": "9"}})
	done := w.waitStatus(key, id, 60*time.Second, "failed", "completed")
	if !strings.Contains(done["error"].(string), "Requested node configuration is not available") {
		t.Fatalf("task %v", done)
	}
}

// Order is Slurm's: with every GPU taken by other users' jobs, a task of
// priority 2 submitted after one of priority 8 starts first once GPUs
// free up.
func TestPlacementHigherPriorityOvertakesInSlurmsQueue(t *testing.T) {
	w := newWorld(t, "placement")
	w.startBackend()
	key := w.tenantKey("bigco", gateway.TierPremium)
	var blockers []string
	for _, n := range w.cluster.Nodes {
		out := w.cluster.Run(t, "sbatch", "--parsable", "-w", n.Name, "--gres=gpu:"+itoa(n.GPUs), "--mem=100", "-o", "/dev/null", "--wrap", "sleep 600")
		blockers = append(blockers, strings.TrimSpace(out))
	}
	t.Cleanup(func() { w.cluster.Run(t, "scancel", strings.Join(blockers, ",")) })
	task := func(name string, priority int) string {
		return w.submit(key, map[string]any{"name": name, "type": "shell", "command": "sleep", "args": []string{"2"},
			"timeout": 120, "priority": priority, "resources": map[string]string{"nvidia.com/gpu": "4"}})
	}
	low := task("low", 8)
	w.waitSqueue(low, "the low-priority placeholder pending", func(j []slurmJob) bool { return len(j) == 1 && j[0].State == "PENDING" })
	high := task("high", 2)
	w.waitSqueue(high, "the high-priority placeholder pending", func(j []slurmJob) bool { return len(j) == 1 && j[0].State == "PENDING" })
	prio := func(taskID string) int {
		return atoi(strings.TrimSpace(w.cluster.Run(t, "squeue", "-h", "--name", "tm-"+taskID, "-o", "%Q")))
	}
	if prio(high) <= prio(low) {
		t.Fatalf("Slurm priorities: high %d, low %d", prio(high), prio(low))
	}
	w.cluster.Run(t, "scancel", strings.Join(blockers, ","))
	w.waitStatus(key, high, 60*time.Second, "running", "completed")
	if s := w.task(key, low)["status"]; s != "assigned" {
		t.Fatalf("the low-priority task is %v while the high-priority one runs, want assigned (pending in Slurm)", s)
	}
	hi := w.waitStatus(key, high, 60*time.Second, "completed")
	lo := w.waitStatus(key, low, 90*time.Second, "completed")
	if !(hi["started_at"].(string) < lo["started_at"].(string)) {
		t.Fatalf("high started %v, low %v", hi["started_at"], lo["started_at"])
	}
}

// The backend SIGKILLed mid-job and started again follows its job: Slurm
// has exactly one job for the attempt, and the task completes once.
func TestBackendKilledMidJobReadoptsTheJob(t *testing.T) {
	w := newWorld(t, "placement")
	w.startBackend()
	key := w.standardKey()
	id := w.submit(key, map[string]any{"name": "survivor", "type": "script", "timeout": 120, "command": "sleep 6; echo survived"})
	running := w.waitStatus(key, id, 60*time.Second, "running")
	w.killBackend()
	w.startBackend()
	done := w.waitStatus(key, id, 90*time.Second, "completed", "failed")
	if done["status"] != "completed" || done["attempt_id"] != running["attempt_id"] || done["retry_count"].(float64) != 0 {
		t.Fatalf("task %v, want completed by attempt %v without a retry", done, running["attempt_id"])
	}
	if out := w.result(key, id)["stdout"]; out != "survived\n" {
		t.Fatalf("stdout %q", out)
	}
	w.waitSqueue(id, "the placeholder to leave squeue", func(j []slurmJob) bool { return len(j) == 0 })
	if jobs := w.sacct(id, 1); len(jobs) != 1 {
		t.Fatalf("sacct %v, want exactly one job for the attempt", jobs)
	}
	runs := 0
	for _, n := range w.cluster.Nodes {
		for _, lt := range w.localTasks(n.Name) {
			if lt["name"] == "tm-"+running["attempt_id"].(string) {
				runs++
			}
		}
	}
	if runs != 1 {
		t.Fatalf("the nodes ran the attempt %d times", runs)
	}
}

// A premium task preempting a Slurm-run standard task frees its
// allocation: the placeholder is cancelled, the premium task runs, and
// the standard task runs again afterwards.
func TestPremiumTaskPreemptsASlurmRunStandardTask(t *testing.T) {
	w := newWorld(t, "placement", func(c *executor.SlurmConfig) { c.Slots = 1 })
	w.startBackend()
	standard := w.standardKey()
	premium := w.tenantKey("bigco", gateway.TierPremium)
	std := w.submit(standard, map[string]any{"name": "standard", "type": "script", "timeout": 120, "priority": 5,
		"command": "sleep 8; echo standard"})
	w.waitStatus(standard, std, 60*time.Second, "running")
	first := w.waitSqueue(std, "the standard task's placeholder running", func(j []slurmJob) bool { return len(j) == 1 && j[0].State == "RUNNING" })
	prem := w.submit(premium, map[string]any{"name": "premium", "type": "shell", "command": "echo", "args": []string{"premium"},
		"timeout": 120, "priority": 2})
	w.waitStatus(standard, std, 30*time.Second, "preempted", "pending")
	w.waitSqueue(std, "the preempted task's placeholder to leave squeue", func(j []slurmJob) bool { return len(j) == 0 })
	if d := w.waitStatus(premium, prem, 60*time.Second, "completed"); w.result(premium, prem)["stdout"] != "premium\n" {
		t.Fatalf("premium task %v", d)
	}
	done := w.waitStatus(standard, std, 90*time.Second, "completed")
	if out := w.result(standard, std)["stdout"]; out != "standard\n" {
		t.Fatalf("standard task %v, stdout %q", done, out)
	}
	jobs := w.sacct(std, 2)
	if len(jobs) != 2 || jobs[0].ID != first[0].ID {
		t.Fatalf("sacct %v, want the preempted placeholder %s and a second one", jobs, first[0].ID)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
