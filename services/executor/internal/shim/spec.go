package shim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// Files in a run directory.
const (
	SpecFile   = "spec.json"
	StatusFile = "status.json"
	StdoutFile = "stdout.log"
	StderrFile = "stderr.log"
	// The tails: a stream's last bytes, written only when the output
	// limit cut the stream (its file then lacks its end).
	StdoutTail = "stdout.tail"
	StderrTail = "stderr.tail"
	LogFile    = "shim.log"
	socketName = "shim.sock"
)

// Spec is what the shim runs. The agent writes it (mode 0600: the task's
// environment may hold secrets) before starting the shim.
type Spec struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
	// Argv is the task's argv; Argv[0] is looked up in the PATH of Env when
	// it has no slash.
	Argv []string `json:"argv"`
	// Env is the task's complete environment (KEY=value).
	Env []string `json:"env"`
	Dir string   `json:"dir"`
	// Timeout stops the task (reason "timeout"); 0 means none.
	Timeout time.Duration `json:"timeout"`
	Grace   time.Duration `json:"grace"`
	// OrphanGrace stops the task (reason StopOrphaned) once no agent has
	// been attached for this long; 0 never does.
	OrphanGrace time.Duration `json:"orphan_grace"`
	// Fence, when positive, is how long the task may run, counted from
	// its start, before the agent must renew it (OpFence gives the next
	// length, counted from the request). A task whose fence passes is
	// stopped with reason StopFenced and killed FenceGrace after SIGTERM,
	// and a stop already under way is hurried to the same SIGKILL. The
	// agent fences the tasks a server leased to it: once the server has
	// not heard from the agent for its dead-agent timeout it leases them
	// again, and the old process must be dead by then, whether the agent
	// died, was stopped or was cut off (docs/executor.md, "Fencing").
	Fence      time.Duration `json:"fence,omitempty"`
	FenceGrace time.Duration `json:"fence_grace,omitempty"`
	// OutputLimit is the number of bytes kept per stream.
	OutputLimit int64 `json:"output_limit"`
	// TailBytes is the size of the kept end of each stream.
	TailBytes        int    `json:"tail_bytes"`
	MemoryLimitBytes int64  `json:"memory_limit_bytes"`
	CPULimitSeconds  int64  `json:"cpu_limit_seconds"`
	ProgressFile     string `json:"progress_file"`
	Socket           string `json:"socket"`
	// SelfArgv re-executes the shim binary (e.g. [exe, "executor", "shim"]);
	// used for the resource-limit wrapper.
	SelfArgv []string `json:"self_argv"`
	// Cgroup, if set, is the task's cgroup: the task joins it before it
	// execs, and when it has ended the shim reads whether the OOM killer
	// struck and removes it (or empties it: KeepCgroup).
	Cgroup *cgroup.Group `json:"cgroup,omitempty"`
	// KeepCgroup asks the shim to leave the task's cgroup, emptied, for
	// the agent to give to a later task (docs/executor.md, "Cgroups are
	// reused") instead of removing it.
	KeepCgroup bool `json:"keep_cgroup,omitempty"`
	// Credential, if set, is the user the task runs as (the sandbox's):
	// the wrapper drops to it, after joining the cgroup, before exec.
	Credential *Credential `json:"credential,omitempty"`
	// TracedStart puts the task in its cgroup and under its rlimits while
	// it is stopped at its first instruction (traced_linux.go) instead of
	// through the wrapper. The agent sets it where ptrace is permitted
	// (ProbeTracedStart); a task with a Credential always takes the
	// wrapper, and so does one whose traced start is refused.
	TracedStart bool `json:"traced_start,omitempty"`
}

// Credential is a user and group to run as.
type Credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Stop reasons the shim itself uses; the agent's own reasons (cancelled,
// preempted, lease_lost, ...) are recorded as given.
const (
	StopTimeout    = "timeout"
	StopOrphaned   = "orphaned"
	StopFenced     = "fenced"
	StopTerminated = "shim_terminated"
)

// Status is the content of status.json: how the task ended.
type Status struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
	PID       int    `json:"pid"`
	// ExitCode is the exit status, 128+signal when killed by a signal, or
	// -1 when the task never started (StartError says why).
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal,omitempty"`
	SignalName string `json:"signal_name,omitempty"`
	// Stop is why the shim stopped the task (a Stop* constant or the
	// agent's reason); empty when the task ended on its own.
	Stop       string    `json:"stop,omitempty"`
	StartError string    `json:"start_error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at"`
	// Stream sizes: total bytes written and bytes dropped by the cap.
	StdoutBytes   int64 `json:"stdout_bytes"`
	StdoutDropped int64 `json:"stdout_dropped"`
	StderrBytes   int64 `json:"stderr_bytes"`
	StderrDropped int64 `json:"stderr_dropped"`
	// Last progress seen.
	Progress        int    `json:"progress"`
	ProgressMessage string `json:"progress_message,omitempty"`
	// OOMKilled: the kernel's OOM killer killed a process of the task's
	// cgroup because of its memory limit.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// SocketPath returns the socket for a run directory. Unix socket paths are
// limited to 108 bytes; a long run directory gets a socket in the temporary
// directory named after a hash of the run directory instead.
func SocketPath(runDir string) string {
	p := filepath.Join(runDir, socketName)
	if len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(runDir))
	return filepath.Join(os.TempDir(), "taskmesh-shim-"+hex.EncodeToString(sum[:8])+".sock")
}

// WriteSpec writes the spec into runDir.
func WriteSpec(runDir string, s Spec) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(runDir, SpecFile), b, 0o600)
}

// ReadSpec returns the spec written into runDir.
func ReadSpec(runDir string) (Spec, error) { return readSpec(runDir) }

func readSpec(runDir string) (Spec, error) {
	var s Spec
	b, err := os.ReadFile(filepath.Join(runDir, SpecFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("parse %s: %w", SpecFile, err)
	}
	if len(s.Argv) == 0 {
		return s, errors.New("spec has no argv")
	}
	return s, nil
}

// ReadStatus returns the status file of runDir; ok is false when there is
// none (the shim has not finished, or never ran).
func ReadStatus(runDir string) (st Status, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(runDir, StatusFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("parse %s: %w", StatusFile, err)
	}
	return st, true, nil
}

func writeStatus(runDir string, st Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(runDir, StatusFile), b, 0o600)
}

// writeAtomic replaces path with data so that readers see the old file or
// the whole new one, whichever process dies when (temporary file, rename).
// It does not fsync: the run directory's files are there for an agent or a
// shim that died, and the page cache outlives both; after a machine crash
// no shim or task is left to resume, the lease decides what runs again,
// and a torn file reads as a lost process
// (docs/decisions/0076-spawn-path-without-fsync.md).
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
