package slurm

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Mode is how the backend runs a task through Slurm.
type Mode string

const (
	// ModePlacement submits a placeholder job sized from the task's
	// resources; once Slurm runs it, the task runs on the Taskmesh agent
	// of the node Slurm chose, and the placeholder is cancelled when the
	// task ends (the slurm-bridge model).
	ModePlacement Mode = "placement"
	// ModeBatch makes the task itself the Slurm job: its argv in the batch
	// script, its output in Slurm's output files, its exit code from the
	// job record.
	ModeBatch Mode = "batch"
)

// PriorityMode is how a task's priority (1 highest … 10) reaches Slurm.
type PriorityMode string

const (
	// PriorityNice lowers a job by (priority − 1) × step: any user may.
	PriorityNice PriorityMode = "nice"
	// PriorityAbsolute sets the job's priority to (11 − priority) × step:
	// Slurm operators only.
	PriorityAbsolute PriorityMode = "absolute"
	// PriorityOff leaves Slurm's priority alone (QoS may still map).
	PriorityOff PriorityMode = "off"
)

// JobConfig is what a job needs besides the task.
type JobConfig struct {
	// AgentID marks the backend's jobs (in their comment).
	AgentID string
	Mode    Mode
	// Partition of the jobs ("" is the cluster's default partition).
	Partition string
	// JobDir is a directory the backend and the nodes share: batch jobs
	// write their output under JobDir/out and run in JobDir/work/<task>
	// unless the task names a workdir. Placeholders run in JobDir.
	JobDir string
	// Priority and PriorityStep map task priorities (default nice, 100).
	Priority     PriorityMode
	PriorityStep int
	// QoS maps task priorities (1–10) to a QoS; unmapped ones get none.
	QoS map[int]string
	// DefaultMemoryMB is asked for when a task names no memory (0: the
	// partition's default).
	DefaultMemoryMB int64
	// Env is the base environment of batch jobs (PATH, LANG, HOME).
	Env map[string]string
}

// commentPrefix starts the comment of every job the backend submits.
const commentPrefix = "taskmesh:"

// jobName is the name of the task's Slurm jobs (squeue shows it).
func jobName(taskID string) string { return "tm-" + taskID }

// jobRef is what a job's comment says about it.
type jobRef struct {
	AgentID, TaskID, AttemptID string
	Mode                       Mode
}

// comment writes the reference a restarted backend reads back: which
// backend, task, attempt and mode the job is for.
func (r jobRef) comment() string {
	v := url.Values{}
	v.Set("agent", r.AgentID)
	v.Set("task", r.TaskID)
	v.Set("attempt", r.AttemptID)
	v.Set("mode", string(r.Mode))
	return commentPrefix + v.Encode()
}

// parseComment reads a comment written by comment; ok is false for jobs
// of anyone else.
func parseComment(c string) (jobRef, bool) {
	rest, ok := strings.CutPrefix(c, commentPrefix)
	if !ok {
		return jobRef{}, false
	}
	v, err := url.ParseQuery(rest)
	if err != nil {
		return jobRef{}, false
	}
	r := jobRef{AgentID: v.Get("agent"), TaskID: v.Get("task"), AttemptID: v.Get("attempt"), Mode: Mode(v.Get("mode"))}
	if r.AgentID == "" || r.TaskID == "" || r.AttemptID == "" || (r.Mode != ModePlacement && r.Mode != ModeBatch) {
		return jobRef{}, false
	}
	return r, true
}

// Resources is what a task asks Slurm for.
type Resources struct {
	CPUs     int
	MemoryMB int64
	GPUs     int
}

// ErrUnsupportedResource: the task names a resource Slurm cannot be asked
// for. Resources are hard constraints, so such a task is refused rather
// than run without it.
var ErrUnsupportedResource = errors.New("resource has no Slurm equivalent")

// taskResources reads the task's resources (Kubernetes quantities):
// nvidia.com/gpu (or gpu) as GPUs per node, cpu as CPUs per task, memory
// as MB per node, each rounded up.
func taskResources(res map[string]string) (Resources, error) {
	var r Resources
	names := make([]string, 0, len(res))
	for name := range res {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		q, err := resource.ParseQuantity(res[name])
		if err != nil {
			return r, fmt.Errorf("resource %s=%q: %w", name, res[name], err)
		}
		if q.Sign() < 0 {
			return r, fmt.Errorf("resource %s=%q is negative", name, res[name])
		}
		switch name {
		case "nvidia.com/gpu", "gpu":
			r.GPUs = int(math.Ceil(q.AsApproximateFloat64()))
		case "cpu":
			r.CPUs = int(math.Ceil(float64(q.MilliValue()) / 1000))
		case "memory":
			r.MemoryMB = int64(math.Ceil(q.AsApproximateFloat64() / (1 << 20)))
		default:
			return r, fmt.Errorf("%s: %w", name, ErrUnsupportedResource)
		}
	}
	return r, nil
}

// timeLimitMinutes is Slurm's time limit for a task: its timeout rounded
// up to whole minutes (Slurm counts minutes), plus slack for placement,
// where the node's agent enforces the exact timeout and the placeholder
// must outlive it.
func timeLimitMinutes(t *taskv1.Task, mode Mode) int {
	secs := int(t.GetTimeout())
	if secs <= 0 {
		secs = 3600
	}
	if mode == ModePlacement {
		secs += int(max(t.GetGracePeriodSec(), 0)) + 60
	}
	return max(1, (secs+59)/60)
}

// Nice is the nice a job of a task with this priority gets (0 when the
// mapping sets none).
func (c JobConfig) Nice(taskPriority int32) int {
	var spec JobSpec
	c.priorityFields(taskPriority, &spec)
	return spec.Nice
}

// priorityFields maps the task's priority onto the job.
func (c JobConfig) priorityFields(taskPriority int32, spec *JobSpec) {
	p := int(taskPriority)
	if p < 1 || p > 10 {
		p = 5
	}
	step := c.PriorityStep
	if step <= 0 {
		step = 100
	}
	switch c.Priority {
	case PriorityAbsolute:
		spec.Priority = (11 - p) * step
	case PriorityOff:
	default:
		spec.Nice = (p - 1) * step
	}
	spec.QoS = c.QoS[p]
}

// Paths of a batch attempt's files under JobDir.
func (c JobConfig) stdoutPath(attemptID string) string {
	return filepath.Join(c.JobDir, "out", attemptID+".out")
}
func (c JobConfig) stderrPath(attemptID string) string {
	return filepath.Join(c.JobDir, "out", attemptID+".err")
}
func (c JobConfig) progressPath(attemptID string) string {
	return filepath.Join(c.JobDir, "out", attemptID+".progress")
}
func (c JobConfig) workDir(t *taskv1.Task) string {
	if t.GetWorkdir() != "" {
		return t.GetWorkdir()
	}
	return filepath.Join(c.JobDir, "work", t.GetId())
}

// Task types each mode runs.
const (
	typeShell  = "shell"
	typePython = "python"
	typeScript = "script"
	typeNoop   = "noop"
)

// Types lists the task types the backend claims.
func Types() []string { return []string{typeShell, typePython, typeScript, typeNoop} }

// jobSpec builds the job of an attempt.
func (c JobConfig) jobSpec(t *taskv1.Task) (JobSpec, error) {
	res, err := taskResources(t.GetResources())
	if err != nil {
		return JobSpec{}, err
	}
	if res.MemoryMB == 0 {
		res.MemoryMB = c.DefaultMemoryMB
	}
	ref := jobRef{AgentID: c.AgentID, TaskID: t.GetId(), AttemptID: t.GetAttemptId(), Mode: c.Mode}
	spec := JobSpec{
		Name: jobName(t.GetId()), Comment: ref.comment(), Partition: c.Partition,
		CPUs: res.CPUs, MemoryMB: res.MemoryMB, GPUs: res.GPUs, TimeLimitMin: timeLimitMinutes(t, c.Mode),
	}
	c.priorityFields(t.GetPriority(), &spec)
	if c.Mode == ModePlacement {
		// The placeholder prints nothing: no output file to create, which
		// would fail the launch where the job's user may not write.
		spec.WorkDir, spec.StdoutPath, spec.StderrPath = c.JobDir, "/dev/null", "/dev/null"
		spec.Env = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}
		spec.Script = placeholderScript
		return spec, nil
	}
	script, err := batchScript(t, c.workDir(t))
	if err != nil {
		return JobSpec{}, err
	}
	spec.Script = script
	// The job starts in JobDir, which exists, and the script makes and
	// enters the task's directory: its own workdir or one under JobDir,
	// made by the job's user and so the job's to write. Slurm's own chdir
	// to a missing directory would run the task in /tmp instead.
	spec.WorkDir = c.JobDir
	spec.StdoutPath, spec.StderrPath = c.stdoutPath(t.GetAttemptId()), c.stderrPath(t.GetAttemptId())
	spec.Env = c.batchEnv(t)
	return spec, nil
}

// placeholderScript holds the allocation until the backend cancels the
// job: the task runs on the node's agent meanwhile. Nothing in it comes
// from the task or the user.
const placeholderScript = `#!/bin/sh
# Taskmesh placement: holds this allocation while the node's Taskmesh agent runs the task;
# the backend cancels the job when the task ends.
exec sleep infinity
`

// signallingPlaceholderScript is the placeholder when the backend takes
// start signals (signal.go): it first tells the backend it runs, through
// bash's /dev/tcp, so that no client program is needed on the node. It is
// bash's own script, so that slurmd's launch starts one interpreter, not
// a shell that then starts bash: during a scheduling pass the launches
// share the node's cores, and the signal is what the task's start waits
// for. The nodes therefore need /bin/bash (docs/slurm.md#the-start-signal).
// Nothing in the script comes from the task or the user: the values are
// the environment's (the backend's) and Slurm's, and are printf's data,
// never read as shell. The signal is sent before the sleep, from a
// subshell (a failed connection ends only the subshell), not beside it:
// the allocation is held either way, and no process outlives its part.
// Without an answer, the backend's listing of the jobs sees the start.
const signallingPlaceholderScript = `#!/bin/bash
# Taskmesh placement: holds this allocation while the node's Taskmesh agent runs the task;
# the backend cancels the job when the task ends. It first tells the backend it runs.
(
body="attempt=$TASKMESH_ATTEMPT_ID&job=$SLURM_JOB_ID&node=$SLURMD_NODENAME&nodes=$SLURM_JOB_NODELIST&gpus=$SLURM_JOB_GPUS&token=$TASKMESH_SIGNAL_TOKEN"
exec 3<>"/dev/tcp/$TASKMESH_SIGNAL_HOST/$TASKMESH_SIGNAL_PORT" || exit 0
printf "POST ` + signalPath + ` HTTP/1.0\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s" "$TASKMESH_SIGNAL_HOST" "${#body}" "$body" >&3
read -r -t 10 status <&3
) </dev/null >/dev/null 2>&1
exec sleep infinity
`

// batchEnv is a batch job's environment: the base, the task's own
// (TASKMESH_ names are the platform's and are dropped), and the task's
// identity and progress file.
func (c JobConfig) batchEnv(t *taskv1.Task) map[string]string {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp",
	}
	for k, v := range c.Env {
		env[k] = v
	}
	for k, v := range t.GetEnv() {
		if !strings.HasPrefix(k, "TASKMESH_") {
			env[k] = v
		}
	}
	env["TASKMESH_TASK_ID"] = t.GetId()
	env["TASKMESH_ATTEMPT_ID"] = t.GetAttemptId()
	env["TASKMESH_PROGRESS_FILE"] = c.progressPath(t.GetAttemptId())
	return env
}

// batchScript writes the task's argument vector into a batch script. No
// user string is ever interpreted by the shell: each is one single-quoted
// word (a quote inside closes, escapes and reopens), and exec replaces
// the shell with the command. A script task's body is shell by definition;
// its arguments become $1, $2, … through `set --`, as on an agent.
//
// The task runs in workDir (its workdir, or its directory under JobDir),
// which the script makes first, as an agent does: if it cannot be made or
// entered, the script says so on stderr and exits 125 before anything of
// the task runs. The path is a single-quoted word like any user string.
// A noop runs nothing and needs no directory.
func batchScript(t *taskv1.Task, workDir string) (string, error) {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	if workDir != "" && t.GetType() != typeNoop {
		q := shellQuote(workDir)
		b.WriteString("mkdir -p " + q + " && cd " + q + " || { printf 'taskmesh: workdir %s cannot be made or entered\\n' " +
			q + " >&2; exit 125; }\n")
	}
	switch t.GetType() {
	case typeShell, typePython, "":
		if t.GetCommand() == "" {
			return "", errors.New("the task has no command")
		}
		b.WriteString("exec ")
		b.WriteString(shellQuote(t.GetCommand()))
		for _, a := range t.GetArgs() {
			b.WriteString(" ")
			b.WriteString(shellQuote(a))
		}
		b.WriteString("\n")
	case typeScript:
		if len(t.GetArgs()) > 0 {
			b.WriteString("set --")
			for _, a := range t.GetArgs() {
				b.WriteString(" ")
				b.WriteString(shellQuote(a))
			}
			b.WriteString("\n")
		}
		b.WriteString(t.GetCommand())
		b.WriteString("\n")
	case typeNoop:
		b.WriteString("exit 0\n")
	default:
		return "", fmt.Errorf("task type %q does not run through Slurm", t.GetType())
	}
	return b.String(), nil
}

// shellQuote makes s one shell word that means exactly s.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// itoa is strconv.Itoa for the few places that need it.
func itoa(n int) string { return strconv.Itoa(n) }
