package agent

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
)

func TestPolicyRefusesTasks(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Types = []string{"shell", "script"}
		c.AllowedCommands = []string{"echo", "sh"}
		c.BlockedPatterns = []string{"rm -rf /", "dd if="}
	})
	tests := []struct {
		name    string
		task    *taskv1.Task
		wantErr string
	}{
		{name: "allowed", task: shell("echo", "hi")},
		{name: "allowed by path base name", task: shell("/bin/echo", "hi")},
		{name: "not allowed", task: shell("rm", "-f", "x"), wantErr: `command "rm" is not in allowed_commands`},
		{name: "blocked in args", task: shell("echo", "rm -rf /"), wantErr: `blocked pattern "rm -rf /"`},
		{name: "blocked in script", task: script("echo start\ndd if=/dev/zero of=x\n"), wantErr: `blocked pattern "dd if="`},
		{name: "script runs as sh", task: script("echo ok")},
		{name: "type not run here", task: &taskv1.Task{Name: "x", Type: "python", Command: "echo"}, wantErr: `task type "python" is not run by this agent`},
	}
	ids := make([]string, len(tests))
	for i, tc := range tests {
		ids[i] = h.fake.Add(tc.task)[0]
	}
	h.start()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := h.fake.WaitComplete(t, ids[i], 10*time.Second)
			if c.GetError() != tc.wantErr {
				t.Errorf("error = %q, want %q", c.GetError(), tc.wantErr)
			}
			row := h.row(ids[i])
			if tc.wantErr != "" && (row.Status != journal.StatusFailed || row.PID != 0 || c.GetExitCode() != -1) {
				t.Errorf("refused task: status %s pid %d exit %d", row.Status, row.PID, c.GetExitCode())
			}
			if tc.wantErr == "" && row.Status != journal.StatusCompleted {
				t.Errorf("allowed task: status %s", row.Status)
			}
		})
	}
	starts := map[string]bool{}
	for _, c := range h.fake.Calls("StartTask") {
		starts[c.Req.(*taskv1.StartTaskRequest).GetTaskId()] = true
	}
	for i, tc := range tests {
		if tc.wantErr != "" && starts[ids[i]] {
			t.Errorf("%s: a refused task was started", tc.name)
		}
	}
}

func TestResourceLimits(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed: %v", err)
	}
	h := newHarness(t, func(c *Config) { c.MemoryLimitBytes = 256 << 20; c.CPULimitSeconds = 1 })
	tests := []struct {
		name       string
		task       *taskv1.Task
		wantCode   int32
		wantStderr string
		wantErr    string
	}{
		{name: "small allocation fits", task: shell(python, "-c", "b = bytearray(16 << 20); print(len(b))")},
		{name: "1 GiB allocation fails", task: shell(python, "-c", "b = bytearray(1 << 30)"), wantCode: 1, wantStderr: "MemoryError"},
		{name: "cpu limit", task: script("while :; do :; done"), wantCode: 152, wantErr: "killed by SIGXCPU"},
	}
	ids := make([]string, len(tests))
	for i, tc := range tests {
		ids[i] = h.fake.Add(tc.task)[0]
	}
	h.start()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := h.fake.WaitComplete(t, ids[i], 30*time.Second)
			if c.GetExitCode() != tc.wantCode || !strings.Contains(c.GetStderr(), tc.wantStderr) || c.GetError() != tc.wantErr {
				t.Errorf("exit %d stderr %q error %q, want %d %q %q", c.GetExitCode(), c.GetStderr(), c.GetError(),
					tc.wantCode, tc.wantStderr, tc.wantErr)
			}
		})
	}
}
