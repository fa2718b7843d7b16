package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

func TestExecution(t *testing.T) {
	t.Setenv("TASKMESH_TEST_AGENT_SECRET", "do-not-leak")
	h := newHarness(t, nil)
	probe := filepath.Join(shortDir(t), "pwned")
	workdir := filepath.Join(shortDir(t), "new", "sub")
	withEnv := shell("env")
	withEnv.Env = map[string]string{"FOO": "bar baz", "TASKMESH_TASK_ID": "forged"}
	inWorkdir := shell("pwd")
	inWorkdir.Workdir = workdir

	tests := []struct {
		name        string
		task        *taskv1.Task
		wantStatus  string
		wantCode    int32
		wantStdout  string // exact, unless empty
		contains    []string
		notContains []string
		wantErr     string
		check       func(t *testing.T, id string)
	}{
		{
			name:       "args are never shell-expanded",
			task:       shell("echo", "$(touch "+probe+")", "a;b", "`id`"),
			wantStatus: journal.StatusCompleted,
			wantStdout: "$(touch " + probe + ") a;b `id`\n",
			check: func(t *testing.T, _ string) {
				if _, err := os.Stat(probe); err == nil {
					t.Error("the argument was run by a shell")
				}
			},
		},
		{
			name:       "script gets its args as positional parameters",
			task:       script(`echo "first=$1"; echo "count=$#"; exit 4`, "a b", "$(c)"),
			wantStatus: journal.StatusFailed, wantCode: 4,
			wantStdout: "first=a b\ncount=2\n",
		},
		{
			name:        "environment is minimal plus task env",
			task:        withEnv,
			wantStatus:  journal.StatusCompleted,
			contains:    []string{"FOO=bar baz", "TASKMESH_ATTEMPT_ID=", "TASKMESH_PROGRESS_FILE=", "PATH=", "TMPDIR="},
			notContains: []string{"do-not-leak", "agent-token-123", "TASKMESH_TASK_ID=forged"},
			check: func(t *testing.T, id string) {
				c := h.fake.Complete(id)
				if !strings.Contains(c.GetStdout(), "TASKMESH_TASK_ID="+id+"\n") {
					t.Errorf("TASKMESH_TASK_ID missing from %q", c.GetStdout())
				}
			},
		},
		{
			name:       "task workdir is created",
			task:       inWorkdir,
			wantStatus: journal.StatusCompleted,
			wantStdout: workdir + "\n",
		},
		{
			name:       "default workdir is WorkRoot/<task id>",
			task:       shell("pwd"),
			wantStatus: journal.StatusCompleted,
			check: func(t *testing.T, id string) {
				want := filepath.Join(h.cfg.DataDir, "work", id) + "\n"
				if got := h.fake.Complete(id).GetStdout(); got != want {
					t.Errorf("pwd = %q, want %q", got, want)
				}
			},
		},
		{
			name:       "stderr and invalid UTF-8",
			task:       script(`printf 'bad:\377\n' >&2`),
			wantStatus: journal.StatusCompleted,
			check: func(t *testing.T, id string) {
				if got := h.fake.Complete(id).GetStderr(); got != "bad:\uFFFD\n" {
					t.Errorf("stderr = %q", got)
				}
			},
		},
		{
			// The API refuses a NUL in any string: the agent must not send
			// one, or the outcome would never be accepted.
			name:       "NUL bytes in output",
			task:       script(`printf 'a\000b\n'; printf 'c\000\n' >&2`),
			wantStatus: journal.StatusCompleted,
			check: func(t *testing.T, id string) {
				c := h.fake.Complete(id)
				if c.GetStdout() != "a\uFFFDb\n" || c.GetStderr() != "c\uFFFD\n" {
					t.Errorf("stdout = %q, stderr = %q", c.GetStdout(), c.GetStderr())
				}
			},
		},
		{
			name:       "command not found",
			task:       shell("no-such-command-xyz"),
			wantStatus: journal.StatusFailed, wantCode: -1,
			wantErr: "executable file not found",
		},
		{
			name:       "killed by a signal",
			task:       script(`kill -SEGV $$`),
			wantStatus: journal.StatusFailed, wantCode: 128 + int32(syscall.SIGSEGV),
			wantErr: "killed by SIGSEGV",
		},
	}
	ids := make([]string, len(tests))
	for i, tc := range tests {
		ids[i] = h.fake.Add(tc.task)[0]
	}
	h.start()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := h.fake.WaitComplete(t, ids[i], 15*time.Second)
			row := h.waitRow(ids[i], 5*time.Second, "synced", func(r journal.Task) bool { return r.Synced })
			if row.Status != tc.wantStatus || c.GetExitCode() != tc.wantCode {
				t.Errorf("status %s exit %d, want %s %d (error %q)", row.Status, c.GetExitCode(), tc.wantStatus, tc.wantCode, c.GetError())
			}
			if tc.wantStdout != "" && c.GetStdout() != tc.wantStdout {
				t.Errorf("stdout = %q, want %q", c.GetStdout(), tc.wantStdout)
			}
			for _, s := range tc.contains {
				if !strings.Contains(c.GetStdout(), s) {
					t.Errorf("stdout lacks %q", s)
				}
			}
			for _, s := range tc.notContains {
				if strings.Contains(c.GetStdout(), s) {
					t.Errorf("stdout contains %q", s)
				}
			}
			if !strings.Contains(c.GetError(), tc.wantErr) {
				t.Errorf("error = %q, want it to contain %q", c.GetError(), tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, ids[i])
			}
		})
	}
}

func TestTimeoutKillsWholeTree(t *testing.T) {
	h := newHarness(t, nil).start()
	pids := filepath.Join(shortDir(t), "pids")
	task := script(`sleep 300 & echo $! >> "$1"
sh -c 'sleep 300 & echo $! >> "$1"; sleep 300' x "$1" & echo $! >> "$1"
echo $$ >> "$1"
wait`, pids)
	task.Timeout = 1
	task.GracePeriodSec = 1
	id := h.fake.Add(task)[0]
	begin := time.Now()
	c := h.fake.WaitComplete(t, id, 15*time.Second)
	if c.GetError() != "timeout after 1s" {
		t.Errorf("error = %q, want timeout after 1s", c.GetError())
	}
	if took := time.Since(begin); took > 6*time.Second {
		t.Errorf("timeout took %s", took)
	}
	row := h.row(id)
	if row.Status != journal.StatusFailed || row.PID == 0 {
		t.Fatalf("row = %+v", row)
	}
	if !groupGone(row.PID) {
		t.Error("processes of the task's group survived the timeout")
	}
	b, _ := os.ReadFile(pids)
	fields := strings.Fields(string(b))
	if len(fields) < 4 {
		t.Fatalf("pid file %q: the tree did not start", b)
	}
	for _, f := range fields {
		var pid int
		for _, r := range f {
			pid = pid*10 + int(r-'0')
		}
		if alive(pid) {
			t.Errorf("process %d survived", pid)
		}
	}
}

// A task deleted on the server while it runs is stopped as a cancelled
// one is, and recorded cancelled: the server cancelled it as it deleted it.
func TestHeartbeatStopForADeletedTask(t *testing.T) {
	h := newHarness(t, nil).start()
	ready := filepath.Join(shortDir(t), "ready")
	id := h.fake.Add(script(`touch "$1"; while :; do sleep 0.05; done`, ready))[0]
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })
	h.fake.StopOnHeartbeat(id, "deleted", 0)
	row := h.waitRow(id, 15*time.Second, "final and synced", func(r journal.Task) bool { return journal.Final(r.Status) && r.Synced })
	if row.Status != journal.StatusCancelled || !strings.Contains(row.Error, "deleted on the server") {
		t.Errorf("row = status %s error %q, want cancelled, deleted on the server", row.Status, row.Error)
	}
	if !groupGone(row.PID) {
		t.Error("the deleted task's processes survived")
	}
}

func TestHeartbeatStopGraceThenKill(t *testing.T) {
	h := newHarness(t, nil).start()
	ready := filepath.Join(shortDir(t), "ready")
	id := h.fake.Add(script(`trap 'echo got-term' TERM; touch "$1"; while :; do sleep 0.05; done`, ready))[0]
	leasetest.WaitFor(t, 10*time.Second, "task running", func() bool { _, err := os.Stat(ready); return err == nil })
	begin := time.Now()
	h.fake.StopOnHeartbeat(id, "cancelled", 1)
	// Once final and synced, any CompleteTask for the attempt would already
	// be recorded (a reported outcome is marked synced after it).
	row := h.waitRow(id, 15*time.Second, "final and synced", func(r journal.Task) bool { return journal.Final(r.Status) && r.Synced })
	if took := time.Since(begin); took < time.Second {
		t.Errorf("task ended %s after the stop, before its 1s grace", took)
	}
	if row.Status != journal.StatusCancelled || !strings.Contains(row.Error, "cancelled by the server") {
		t.Errorf("row = status %s error %q", row.Status, row.Error)
	}
	if row.ExitCode == nil || *row.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code = %v, want SIGKILL", row.ExitCode)
	}
	if !strings.Contains(row.Stdout, "got-term") {
		t.Errorf("stdout %q: SIGTERM did not come first", row.Stdout)
	}
	if !groupGone(row.PID) {
		t.Error("process group survived")
	}
	if c := h.fake.Calls("CompleteTask"); len(c) != 0 {
		t.Errorf("a cancelled attempt was completed: %v", c)
	}
	hb := h.fake.Calls("SendHeartbeat")
	found := false
	for _, c := range hb {
		for _, a := range c.Req.(*taskv1.SendHeartbeatRequest).GetAttemptIds() {
			found = found || a == row.AttemptID
		}
	}
	if !found {
		t.Error("heartbeats never listed the running attempt")
	}
}

// A task whose process cannot start (its command does not exist) fails
// with the reason and leaves no cgroup behind on any controller: the
// agent made one for it before the shim found out.
func TestTaskThatCannotStartLeavesNoCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	h := newHarness(t, nil)
	id := h.fake.Add(shell("no-such-command-xyz"))[0]
	h.start()
	if c := h.fake.WaitComplete(t, id, 30*time.Second); !strings.Contains(c.GetError(), "executable file not found") {
		t.Fatalf("completion = %v, want the start error", c)
	}
	attempt := h.row(id).AttemptID
	// The agent's own parents, found the way the agent finds them.
	hier, err := cgroup.Detect(cgroup.Host{}, "taskmesh-"+safeName(h.cfg.AgentID))
	if err != nil {
		t.Fatalf("running as root but no usable cgroups: %v", err)
	}
	defer hier.Release()
	for c, parent := range hier.Parents {
		dir := filepath.Join(parent, safeName(attempt))
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the attempt's cgroup %s is still there (%v)", c, dir, err)
		}
	}
}
