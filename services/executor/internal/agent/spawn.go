package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/backends/video"
	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
	"github.com/taskmesh/taskmesh/services/executor/internal/isolation"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// safeName makes an id usable as a single path element.
func safeName(id string) string {
	s := unsafeChars.ReplaceAllString(id, "_")
	if s == "" || s == "." || s == ".." {
		s = "_" + s
	}
	return s
}

// prepare creates the run directory and working directory, the task's
// cgroup, and builds the shim spec.
func (a *Agent) prepare(t journal.Task) (string, shim.Spec, error) {
	runDir := filepath.Join(a.cfg.DataDir, "runs", safeName(t.AttemptID))
	res, err := isolation.ParseResources(t.Resources)
	if err != nil {
		return "", shim.Spec{}, err
	}
	// A sandboxed task (not the agent's own video runner, which reads its
	// job from the run directory) gets a directory of its own in the run
	// directory for its temporary files, progress file and script: the
	// run directory itself (spec, output, socket) stays the agent's.
	sandboxed := a.isolation.Sandboxed() && policy.NormalizeType(t.Type) != policy.TypeVideo
	taskDir := runDir
	if sandboxed {
		taskDir = filepath.Join(runDir, "task")
	}
	a.spareRuns.take(runDir) // a spare, when there is one; else created here
	if err := os.MkdirAll(filepath.Join(taskDir, runTmpDir), 0o700); err != nil {
		return "", shim.Spec{}, fmt.Errorf("run dir: %w", err)
	}
	workdir := t.Workdir
	if workdir == "" {
		workdir = filepath.Join(a.cfg.WorkRoot, safeName(t.ID))
	}
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return runDir, shim.Spec{}, fmt.Errorf("workdir %s: %w", workdir, err)
	}
	if sandboxed {
		if err := a.isolation.Traversable(runDir); err != nil {
			return runDir, shim.Spec{}, err
		}
		for _, d := range []string{taskDir, filepath.Join(taskDir, "tmp")} {
			if err := a.isolation.PrepareDir(d); err != nil {
				return runDir, shim.Spec{}, err
			}
		}
		if t.Workdir == "" {
			if err := a.isolation.PrepareDir(workdir); err != nil {
				return runDir, shim.Spec{}, err
			}
		}
	}
	var argv []string
	switch policy.NormalizeType(t.Type) {
	case policy.TypeVideo:
		// The runner is this binary (`executor shim video`), started by the
		// shim like any task process so that timeout, cancel and preemption
		// reach ffmpeg the same way.
		job, err := a.videoJob(t)
		if err != nil {
			return runDir, shim.Spec{}, err
		}
		if err := video.Save(runDir, job); err != nil {
			return runDir, shim.Spec{}, fmt.Errorf("write video job: %w", err)
		}
		argv = append(append([]string{}, a.cfg.RunnerCommand...), "video", "-dir", runDir)
	case policy.TypeScript:
		// The body is a file, never a `sh -c` string: arguments stay
		// arguments ($1, $2, ...).
		script := filepath.Join(taskDir, "script.sh")
		if err := os.WriteFile(script, []byte(t.Command), 0o700); err != nil {
			return runDir, shim.Spec{}, fmt.Errorf("write script: %w", err)
		}
		if err := a.prepareSandboxFile(sandboxed, script); err != nil {
			return runDir, shim.Spec{}, err
		}
		argv = append([]string{"/bin/sh", script}, t.Args...)
	default:
		argv = append([]string{t.Command}, t.Args...)
	}
	if sandboxed {
		argv = a.isolation.Wrap(argv, workdir, taskDir)
	}
	progressFile := filepath.Join(taskDir, "progress")
	env := append([]string{}, a.baseEnv...)
	env = append(env, "TMPDIR="+filepath.Join(taskDir, runTmpDir))
	for k, v := range t.Env {
		if strings.HasPrefix(k, "TASKMESH_") {
			continue
		}
		env = append(env, k+"="+v)
	}
	env = append(env,
		"TASKMESH_TASK_ID="+t.ID,
		"TASKMESH_ATTEMPT_ID="+t.AttemptID,
		"TASKMESH_PROGRESS_FILE="+progressFile)
	// The journal holds the effective grace: the server fills its default
	// at submission and CreateLocalTask the agent's, so 0 is a grace of 0
	// (SIGKILL right after SIGTERM), never "unset" ("Stopping" in
	// docs/executor.md#how-a-task-runs).
	grace := time.Duration(t.GracePeriodSec) * time.Second
	group, err := a.isolation.Cgroup(safeName(t.AttemptID), res)
	if err != nil {
		return runDir, shim.Spec{}, fmt.Errorf("resource limits: %w", err)
	}
	// Only a leased task must end when its agent is gone: the server
	// gives it to another agent. A local task is this machine's alone;
	// it runs on until its agent is back to read its outcome, however
	// long that takes (docs/executor.md, "Fencing").
	orphanGrace := a.cfg.OrphanGrace
	if t.Origin == journal.OriginLocal {
		orphanGrace = 0
	}
	spec := shim.Spec{
		TaskID: t.ID, AttemptID: t.AttemptID,
		Argv: argv, Env: dedupeEnv(env), Dir: workdir,
		Timeout:          time.Duration(t.Timeout) * time.Second,
		Grace:            grace,
		OrphanGrace:      orphanGrace,
		OutputLimit:      a.cfg.OutputLimit,
		TailBytes:        tailBytes,
		MemoryLimitBytes: minPositive(a.cfg.MemoryLimitBytes, a.isolation.RlimitAS(res)),
		CPULimitSeconds:  a.cfg.CPULimitSeconds,
		ProgressFile:     progressFile,
		Socket:           shim.SocketPath(runDir),
		SelfArgv:         a.cfg.ShimCommand,
		Cgroup:           group,
		KeepCgroup:       group != nil && a.isolation.ReusesGroups(),
		TracedStart:      a.tracedStart,
	}
	if uid, gid, ok := a.isolation.Credential(); ok && sandboxed {
		spec.Credential = &shim.Credential{UID: uid, GID: gid}
	}
	return runDir, spec, nil
}

// prepareSandboxFile gives a file the task must read to its user.
func (a *Agent) prepareSandboxFile(sandboxed bool, path string) error {
	if !sandboxed {
		return nil
	}
	return a.isolation.PrepareDir(path)
}

// minPositive is the smaller of two limits, 0 meaning none.
func minPositive(x, y int64) int64 {
	switch {
	case x <= 0:
		return y
	case y <= 0:
		return x
	}
	return min(x, y)
}

// dedupeEnv keeps the last value of each variable (task env overrides the
// base).
func dedupeEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// removeGroup removes the cgroup prepared for spec when no shim was
// started to remove it at the task's end (a shim that reports a start
// error removes it itself).
func removeGroup(spec shim.Spec) {
	if spec.Cgroup != nil {
		_ = cgroup.Remove(spec.Cgroup.Dirs)
	}
}

// spawnAndSupervise starts the shim and watches the attempt to its end.
func (a *Agent) spawnAndSupervise(ctx context.Context, at *attempt) {
	t := at.task
	runDir, spec, err := a.prepare(t)
	if err != nil {
		a.finish(ctx, at, a.failedBeforeStart(err.Error()))
		return
	}
	cp, err := a.prepareCheckpoint(ctx, t, runDir)
	if err != nil {
		removeGroup(spec)
		a.finish(ctx, at, a.failedBeforeStart(err.Error()))
		return
	}
	if cp != "" {
		spec.Env = append(spec.Env, cp)
	}
	if a.fenced(t) {
		fence, stop := a.awaitFence(ctx, at)
		if stop != nil || fence <= 0 {
			removeGroup(spec)
			if stop != nil {
				a.finishStopped(ctx, at, *stop)
			}
			return // else shutting down: recovery starts it from the journal
		}
		spec.Fence, spec.FenceGrace = fence, a.fenceGraceFor(t)
	}
	// Journal the run directory before the shim exists: a restart then
	// finds the shim (or its status file) even if Start never returned.
	if err := a.journal.SetProcess(journalCtx, t.AttemptID, runDir, spec.Socket, 0, 0); err != nil {
		a.log.Error("journal", "err", err)
		return
	}
	at.task.RunDir, at.task.ShimSocket = runDir, spec.Socket
	spawnStart := time.Now()
	started, err := a.shims.Start(ctx, runDir, spec)
	var se *shim.StartError
	switch {
	case errors.As(err, &se):
		a.finishFromRunDir(ctx, at, nil)
		return
	case err != nil && ctx.Err() != nil:
		return // shutting down; recovery finds the shim through the journal
	case err != nil:
		removeGroup(spec)
		a.finish(ctx, at, a.failedBeforeStart("shim: "+err.Error()))
		return
	}
	a.metrics.spawned(ctx, spawnStart)
	_ = a.journal.SetProcess(journalCtx, t.AttemptID, runDir, spec.Socket, started.ShimPID, started.PID)
	at.task.ShimPID, at.task.PID = started.ShimPID, started.PID
	a.supervise(ctx, at)
}

// shimStarter starts serving a run directory's task; its errors are
// shim.Start's (a *shim.StartError when the task could not start).
type shimStarter interface {
	Start(ctx context.Context, runDir string, spec shim.Spec) (shim.Started, error)
}

// perTaskShims starts a shim process for every task.
type perTaskShims struct {
	command, env []string
}

func (p perTaskShims) Start(ctx context.Context, runDir string, spec shim.Spec) (shim.Started, error) {
	return shim.Start(ctx, shim.Launch{Command: p.command, Env: p.env, RunDir: runDir, Spec: spec})
}
