package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// trainScript is the training-loop stand-in of deployments/examples.
func trainScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../../../deployments/examples/checkpoint-train.sh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

var stepLine = regexp.MustCompile(`^step (\d+)$`)

// steps returns the step numbers an attempt printed, and the step it
// resumed at (-1: it started from the beginning).
func steps(t *testing.T, stdout string) (done []int, resumedAt int) {
	t.Helper()
	resumedAt = -1
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if s, ok := strings.CutPrefix(line, "resumed at step "); ok {
			resumedAt, _ = strconv.Atoi(s)
		}
		if m := stepLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			done = append(done, n)
		}
	}
	return done, resumedAt
}

// waitSteps waits until the training task reported progress: its loop
// runs, so its SIGTERM trap is set.
func (w *world) waitSteps(key, id string) {
	w.t.Helper()
	waitFor(w.t, 30*time.Second, "the training loop's first steps", func() bool {
		p, _ := w.task(key, id)["progress"].(float64)
		return p > 0
	})
}

// savedCheckpoint reports the key of the task's saved checkpoint ("" for
// none).
func savedCheckpoint(tk map[string]any) string {
	k, _ := obj(tk["checkpoint"])["key"].(string)
	return k
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// preemptOnAgent1 runs a 30-step training task on agent-1, preempts it
// with a task 3 priorities higher that only agent-1 may run, keeps agent-1
// busy afterwards and returns the victim's final state, which agent-2 ran.
func preemptOnAgent1(t *testing.T, cooperative bool) (victim map[string]any, preemptor string) {
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	spec := map[string]any{"name": "train", "type": "shell", "command": "sh", "args": []string{trainScript(t), "30", "0.2"},
		"priority": 5, "grace_period_sec": 5}
	if cooperative {
		spec["checkpoint"] = map[string]any{"enabled": true}
	}
	id := w.submit(key, spec)
	first := w.waitStatus(key, id, 20*time.Second, "running")
	w.waitSteps(key, id)
	// agent-2 is free from now on, but the preemptor is for agent-1 only:
	// it takes agent-1's slot from the training task.
	w.startAgent("agent-2", w.agentToken("agent-2"), 1)
	// The preemptor runs until the test has queued agent-1's next task.
	release := filepath.Join(w.dir, "release-"+id)
	preemptor = w.submit(key, map[string]any{"name": "urgent", "type": "shell", "command": "sh",
		"args":     []string{"-c", `while [ ! -e "$1" ]; do sleep 0.05; done; echo urgent done`, "urgent", release},
		"priority": 2, "machine_id": "machine-agent-1"})
	w.waitStatus(key, id, 30*time.Second, "preempted")
	w.waitStatus(key, preemptor, 30*time.Second, "running")
	// After the preemptor, agent-1 takes more work of its own (queued
	// behind the preemptor, and ahead of the training task by priority),
	// so the training task runs again on agent-2.
	next := w.submit(key, map[string]any{"name": "next", "type": "shell", "command": "sleep", "args": []string{"3"},
		"priority": 1, "machine_id": "machine-agent-1"})
	if tk := w.task(key, next); tk["status"] != "pending" {
		t.Fatalf("agent-1's next task = %v", tk["status"])
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if done := w.waitStatus(key, preemptor, 30*time.Second, "completed"); done["stdout"] != "urgent done\n" {
		t.Fatalf("preemptor = %v", done)
	}
	victim = w.waitStatus(key, id, 60*time.Second, "completed")
	if victim["attempt_id"] == first["attempt_id"] || victim["assigned_agent_id"] != "agent-2" {
		t.Fatalf("the training task ran again as %v on %v (first attempt %v)", victim["attempt_id"], victim["assigned_agent_id"], first["attempt_id"])
	}
	pre := obj(victim["preemption"])
	if pre["preempted_by"] != preemptor || pre["task_id"] != id || pre["preempted_at"] == nil {
		t.Fatalf("preemption = %v, want preempted_by %s", pre, preemptor)
	}
	return victim, preemptor
}

// A cooperative task counting steps, preempted by a task 3 priorities
// higher, saves its checkpoint and, once the preemptor ended, resumes on
// another agent from the saved step: no step is done twice.
func TestCooperativeTaskResumesFromItsCheckpointOnAnotherAgent(t *testing.T) {
	t.Parallel()
	victim, _ := preemptOnAgent1(t, true)
	done, resumedAt := steps(t, victim["stdout"].(string))
	if resumedAt < 1 || resumedAt >= 30 || len(done) != 30-resumedAt || done[0] != resumedAt+1 || done[len(done)-1] != 30 {
		t.Fatalf("resumed at %d, then did steps %v (checkpoint %v, preemption %v):\n%s", resumedAt, done, victim["checkpoint"], victim["preemption"], victim["stdout"])
	}
	pre, cp := obj(victim["preemption"]), obj(victim["checkpoint"])
	if cp["enabled"] != true || savedCheckpoint(victim) == "" || pre["checkpoint"] != cp["key"] {
		t.Fatalf("checkpoint %v, preemption %v", cp, pre)
	}
	if !strings.HasPrefix(cp["key"].(string), "checkpoints/") {
		t.Fatalf("checkpoint key %v", cp["key"])
	}
}

// A generic task preempted the same way is killed and reruns from the
// start.
func TestGenericPreemptedTaskRerunsFromTheStart(t *testing.T) {
	t.Parallel()
	victim, _ := preemptOnAgent1(t, false)
	done, resumedAt := steps(t, victim["stdout"].(string))
	if resumedAt != -1 || len(done) != 30 || done[0] != 1 {
		t.Fatalf("resumed at %d, steps %v", resumedAt, done)
	}
	if pre := obj(victim["preemption"]); pre["checkpoint"] != nil && pre["checkpoint"] != "" {
		t.Fatalf("a generic task saved a checkpoint: %v", pre)
	}
}

// Suspend and resume through the task API: a running cooperative task
// saves its checkpoint and stops, and its GPUs go to the next task of the
// queue; a pending task is held; both run to the end once resumed. A final
// task cannot be suspended (409/30002), another tenant's is 404/30004.
func TestSuspendAndResume(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startAgent("agent-1", w.agentToken("agent-1"), 3)
	key := w.s.DemoAPIKey // tier standard: its GPU work borrows the cohort's 8 GPUs
	gpus := map[string]string{"nvidia.com/gpu": "8"}
	train := w.submit(key, map[string]any{"name": "train", "type": "shell", "command": "sh",
		"args": []string{trainScript(t), "25", "0.2"}, "checkpoint": map[string]any{"enabled": true},
		"grace_period_sec": 5, "resources": gpus})
	w.waitStatus(key, train, 30*time.Second, "running")
	w.waitSteps(key, train)
	// The next GPU task waits for the quota the training task holds.
	next := w.submit(key, map[string]any{"name": "next", "type": "shell", "command": "echo", "args": []string{"next done"}, "resources": gpus})
	if tk := w.task(key, next); tk["status"] != "pending" || tk["admitted"] == true {
		t.Fatalf("next task = %v", tk)
	}

	code, body, _ := w.call("POST", "/api/v1/tasks/"+train+"/suspend", "", map[string]any{"reason": "maintenance"})
	if code != 401 {
		t.Fatalf("suspend without a key = %d %v", code, body)
	}
	other := w.tenantKey("other")
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+train+"/suspend", other, map[string]any{}); code != 404 || body["code"] != float64(30004) {
		t.Fatalf("another tenant's suspend = %d %v", code, body)
	}
	code, body, _ = w.call("POST", "/api/v1/tasks/"+train+"/suspend", key, map[string]any{"reason": "maintenance"})
	if code != 200 || body["status"] != "suspended" {
		t.Fatalf("suspend = %d %v", code, body)
	}
	// Its checkpoint is saved, and its quota goes to the waiting task.
	waitFor(t, 30*time.Second, "the suspended task's checkpoint", func() bool {
		return savedCheckpoint(w.task(key, train)) != ""
	})
	if done := w.waitStatus(key, next, 30*time.Second, "completed"); done["stdout"] != "next done\n" {
		t.Fatalf("next = %v", done)
	}
	if tk := w.task(key, train); tk["status"] != "suspended" {
		t.Fatalf("train = %v", tk["status"])
	}
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+next+"/suspend", key, map[string]any{}); code != 409 || body["code"] != float64(30002) {
		t.Fatalf("suspend of a completed task = %d %v", code, body)
	}
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+next+"/resume", key, map[string]any{}); code != 409 || body["code"] != float64(30002) {
		t.Fatalf("resume of a completed task = %d %v", code, body)
	}

	// A pending task is held: suspended while it waits for the GPUs, it
	// stays suspended while the resumed training task runs.
	held := w.submit(key, map[string]any{"name": "held", "type": "shell", "command": "echo", "args": []string{"held done"}, "resources": gpus})
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+held+"/suspend", key, map[string]any{}); code != 200 || body["status"] != "suspended" {
		t.Fatalf("suspend of a pending task = %d %v", code, body)
	}
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+train+"/resume", other, map[string]any{}); code != 404 || body["code"] != float64(30004) {
		t.Fatalf("another tenant's resume = %d %v", code, body)
	}
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+train+"/resume", key, map[string]any{}); code != 200 || body["status"] != "pending" {
		t.Fatalf("resume = %d %v", code, body)
	}
	resumed := w.waitStatus(key, train, 60*time.Second, "completed")
	done, resumedAt := steps(t, resumed["stdout"].(string))
	if resumedAt < 1 || len(done) != 25-resumedAt || done[0] != resumedAt+1 {
		t.Fatalf("resumed at %d, then did steps %v (checkpoint %v):\n%s", resumedAt, done, resumed["checkpoint"], resumed["stdout"])
	}
	if tk := w.task(key, held); tk["status"] != "suspended" {
		t.Fatalf("held = %v", tk["status"])
	}
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+held+"/resume", key, map[string]any{}); code != 200 || body["status"] != "pending" {
		t.Fatalf("resume of the held task = %d %v", code, body)
	}
	if tk := w.waitStatus(key, held, 30*time.Second, "completed"); tk["stdout"] != "held done\n" {
		t.Fatalf("held = %v", tk)
	}
}
