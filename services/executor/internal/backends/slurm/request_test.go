package slurm

import (
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// Every quoted word means exactly itself to a real shell, whatever it
// holds.
func TestShellQuoteIsOneLiteralWord(t *testing.T) {
	args := append([]string{"[%s]\\n"}, hostile...)
	var line strings.Builder
	line.WriteString("printf")
	for _, a := range args {
		line.WriteString(" " + shellQuote(a))
	}
	out, err := exec.Command("/bin/sh", "-c", line.String()).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, a := range hostile {
		want.WriteString("[" + a + "]\n")
	}
	if string(out) != want.String() {
		t.Fatalf("shell saw\n%q\nwant\n%q", out, want.String())
	}
}

func TestBatchScript(t *testing.T) {
	enter := func(dir string) string {
		return "mkdir -p " + dir + " && cd " + dir + " || { printf 'taskmesh: workdir %s cannot be made or entered\\n' " + dir +
			" >&2; exit 125; }\n"
	}
	tests := []struct {
		task *taskv1.Task
		want string
	}{
		{&taskv1.Task{Type: "shell", Command: "python3", Args: []string{"-c", "print('hi')"}, Workdir: "/data"},
			"#!/bin/sh\n" + enter("'/data'") + "exec 'python3' '-c' 'print('\\''hi'\\'')'\n"},
		{&taskv1.Task{Type: "python", Command: "train.py"},
			"#!/bin/sh\n" + enter("'/jobs/work/t'") + "exec 'train.py'\n"},
		{&taskv1.Task{Type: "script", Command: "echo \"$1\"", Args: []string{"a b"}, Workdir: "/w"},
			"#!/bin/sh\n" + enter("'/w'") + "set -- 'a b'\necho \"$1\"\n"},
		{&taskv1.Task{Type: "shell", Command: "true", Workdir: "/it's $(here)"},
			"#!/bin/sh\n" + enter(`'/it'\''s $(here)'`) + "exec 'true'\n"},
		{&taskv1.Task{Type: "noop", Workdir: "/w"}, "#!/bin/sh\nexit 0\n"},
	}
	for _, tt := range tests {
		dir := tt.task.GetWorkdir()
		if dir == "" {
			dir = "/jobs/work/t"
		}
		got, err := batchScript(tt.task, dir)
		if err != nil || got != tt.want {
			t.Errorf("batchScript(%v) =\n%q, %v\nwant\n%q", tt.task, got, err, tt.want)
		}
	}
	for _, bad := range []*taskv1.Task{{Type: "shell"}, {Type: "video", Command: "x"}} {
		if _, err := batchScript(bad, ""); err == nil {
			t.Errorf("batchScript(%v) accepted", bad)
		}
	}
}

func TestTaskResources(t *testing.T) {
	tests := []struct {
		in      map[string]string
		want    Resources
		wantErr error
	}{
		{nil, Resources{}, nil},
		{map[string]string{"nvidia.com/gpu": "2", "cpu": "500m", "memory": "8Gi"}, Resources{CPUs: 1, MemoryMB: 8192, GPUs: 2}, nil},
		{map[string]string{"gpu": "1", "cpu": "4", "memory": "1G"}, Resources{CPUs: 4, MemoryMB: 954, GPUs: 1}, nil},
		{map[string]string{"memory": "100Mi"}, Resources{MemoryMB: 100}, nil},
		{map[string]string{"example.com/fpga": "1"}, Resources{}, ErrUnsupportedResource},
	}
	for _, tt := range tests {
		got, err := taskResources(tt.in)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && got != tt.want) {
			t.Errorf("taskResources(%v) = %+v, %v; want %+v, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	for _, bad := range []map[string]string{{"cpu": "lots"}, {"memory": "-1Gi"}} {
		if _, err := taskResources(bad); err == nil {
			t.Errorf("taskResources(%v) accepted", bad)
		}
	}
}

// A claimed task becomes the job of its mode: placeholder or batch,
// sized, limited in time, prioritised and labelled for re-adoption.
func TestJobSpec(t *testing.T) {
	task := &taskv1.Task{Id: "t1", AttemptId: "a1", Type: "shell", Command: "run", Args: []string{"x"}, Timeout: 90,
		Priority: 2, GracePeriodSec: 10, Resources: map[string]string{"nvidia.com/gpu": "3"}, Env: map[string]string{"K": "v", "TASKMESH_X": "no"}}
	cfg := JobConfig{AgentID: "slurm-1", Partition: "gpu", JobDir: "/jobs", DefaultMemoryMB: 512, QoS: map[int]string{1: "high", 2: "high"}}

	cfg.Mode = ModePlacement
	p, err := cfg.jobSpec(task)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "tm-t1" || p.GPUs != 3 || p.MemoryMB != 512 || p.TimeLimitMin != 3 || p.Nice != 100 || p.QoS != "high" ||
		p.Script != placeholderScript || p.WorkDir != "/jobs" || p.StdoutPath != "/dev/null" || p.StderrPath != "/dev/null" {
		t.Errorf("placement spec %+v", p)
	}
	if ref, ok := parseComment(p.Comment); !ok || ref != (jobRef{AgentID: "slurm-1", TaskID: "t1", AttemptID: "a1", Mode: ModePlacement}) {
		t.Errorf("comment %q reads as %+v %v", p.Comment, ref, ok)
	}

	cfg.Mode, cfg.Priority, cfg.PriorityStep = ModeBatch, PriorityAbsolute, 1000
	b, err := cfg.jobSpec(task)
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp",
		"K": "v", "TASKMESH_TASK_ID": "t1", "TASKMESH_ATTEMPT_ID": "a1", "TASKMESH_PROGRESS_FILE": "/jobs/out/a1.progress"}
	if b.TimeLimitMin != 2 || b.Priority != 9000 || b.Nice != 0 || b.StdoutPath != "/jobs/out/a1.out" ||
		b.StderrPath != "/jobs/out/a1.err" || b.WorkDir != "/jobs" || !reflect.DeepEqual(b.Env, wantEnv) ||
		!strings.Contains(b.Script, "cd '/jobs/work/t1'") {
		t.Errorf("batch spec %+v", b)
	}
	// A task's own workdir is made and entered by the script too: Slurm
	// starts the job in the job directory, which exists.
	task.Workdir = "/data/new"
	if b, err = cfg.jobSpec(task); err != nil || b.WorkDir != "/jobs" || !strings.Contains(b.Script, "mkdir -p '/data/new' && cd '/data/new'") {
		t.Errorf("batch spec with a workdir %+v, %v", b, err)
	}
	for _, c := range []string{"", "taskmesh:", "taskmesh:agent=a&task=t&attempt=x&mode=other", "someone else's comment"} {
		if _, ok := parseComment(c); ok {
			t.Errorf("parseComment(%q) accepted", c)
		}
	}
}

// Final states map onto the lease API as docs/slurm.md#states says.
func TestOutcomes(t *testing.T) {
	ran := func(j Job) Job { j.ID, j.BatchHost = 7, "node-a"; return j }
	tests := []struct {
		job      Job
		exit     int
		errPart  string
		succeeds bool
	}{
		{ran(Job{State: StateCompleted}), 0, "", true},
		{ran(Job{State: StateFailed, ExitCode: 3}), 3, "", false},
		{ran(Job{State: StateFailed, Signal: 9}), -1, "killed by SIGKILL", false},
		{Job{ID: 7, State: StateFailed, Reason: "BadConstraints"}, -1, "slurm: job 7 FAILED (BadConstraints)", false},
		{ran(Job{State: StateTimeout, Reason: "TimeLimit"}), -1, "slurm: job 7 TIMEOUT (TimeLimit)", false},
		{ran(Job{State: StateOutOfMemory}), -1, "OUT_OF_MEMORY", false},
		{ran(Job{State: StateNodeFail, Nodes: "node-b"}), -1, "NODE_FAIL on node-b", false},
	}
	for _, tt := range tests {
		o := batchOutcome(tt.job)
		if o.exitCode != tt.exit || !strings.Contains(o.err, tt.errPart) || o.Failed() == tt.succeeds || o.preemptedBy != "" {
			t.Errorf("batchOutcome(%s) = %+v, want exit %d and %q", tt.job.State, o, tt.exit, tt.errPart)
		}
	}
	if o := placementOutcome(Job{ID: 7, State: StateTimeout}); !strings.Contains(o.err, "placeholder job ended: slurm: job 7 TIMEOUT") ||
		o.preemptedBy != "" || !o.Failed() {
		t.Errorf("placementOutcome %+v", o)
	}
	// Taken away by Slurm, in either mode: preempted, not failed.
	for _, outcomeOf := range []func(Job) outcome{batchOutcome, placementOutcome} {
		for _, j := range []Job{ran(Job{State: StatePreempted}), ran(Job{State: StateCancelled})} {
			o := outcomeOf(j)
			if o.preemptedBy != "slurm" || o.Failed() || !strings.Contains(o.err, "slurm: job 7 "+string(j.State)+": preempted in Slurm; the task is requeued") {
				t.Errorf("outcome of %s = %+v, want preempted by slurm", j.State, o)
			}
		}
	}
	for _, tt := range []struct {
		job  Job
		want string
	}{
		{Job{ID: 9, Reason: "Priority"}, "slurm: job 9 PENDING (Priority)"},
		{Job{ID: 9, Reason: "ReqNodeNotAvail", Description: "ReqNodeNotAvail, UnavailableNodes:node-c"},
			"slurm: job 9 PENDING (ReqNodeNotAvail, UnavailableNodes:node-c)"},
		{Job{ID: 9, Reason: "Resources", Description: "waiting for GPUs"}, "slurm: job 9 PENDING (Resources: waiting for GPUs)"},
		{Job{ID: 9, Reason: "None"}, "slurm: job 9 PENDING"},
	} {
		if msg := pendingMessage(tt.job); msg != tt.want {
			t.Errorf("pendingMessage(%+v) = %q, want %q", tt.job, msg, tt.want)
		}
	}
}

// Nice is what the job of a task of each priority gets: what anyone
// comparing with the backend's jobs (the benchmark's sbatch anchor) must
// ask for to stand level with them.
func TestNiceFollowsThePriorityMapping(t *testing.T) {
	for _, tc := range []struct {
		cfg      JobConfig
		priority int32
		want     int
	}{
		{JobConfig{}, 5, 400},
		{JobConfig{}, 1, 0},
		{JobConfig{}, 0, 400}, // unset: the default priority, 5
		{JobConfig{PriorityStep: 10}, 10, 90},
		{JobConfig{Priority: PriorityAbsolute}, 5, 0},
		{JobConfig{Priority: PriorityOff}, 9, 0},
	} {
		if got := tc.cfg.Nice(tc.priority); got != tc.want {
			t.Errorf("%+v: Nice(%d) = %d, want %d", tc.cfg, tc.priority, got, tc.want)
		}
	}
}
