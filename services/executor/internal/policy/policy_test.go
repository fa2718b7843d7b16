package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	p := Policy{
		AllowedCommands: []string{"python", "sh", "nvidia-smi"},
		BlockedPatterns: []string{"rm -rf /", "dd if="},
	}
	tests := []struct {
		name string
		p    Policy
		task Task
		want string // "" allowed
	}{
		{name: "allowed", p: p, task: Task{Type: "python", Command: "python", Args: []string{"train.py"}}},
		{name: "allowed by base name", p: p, task: Task{Type: "shell", Command: "/usr/bin/nvidia-smi"}},
		{name: "empty type is shell", p: p, task: Task{Command: "bash"}, want: `command "bash" is not in allowed_commands`},
		{name: "not allowed", p: p, task: Task{Type: "shell", Command: "rm", Args: []string{"-rf", "x"}}, want: `command "rm" is not in allowed_commands`},
		{name: "script needs sh", p: Policy{AllowedCommands: []string{"python"}}, task: Task{Type: "script", Command: "echo hi"}, want: `command "sh" is not in allowed_commands`},
		{name: "script allowed", p: p, task: Task{Type: "script", Command: "echo hi"}},
		{name: "blocked across args", p: p, task: Task{Type: "shell", Command: "sh", Args: []string{"-c", "rm", "-rf", "/"}}, want: `blocked pattern "rm -rf /"`},
		{name: "blocked in script", p: p, task: Task{Type: "script", Command: "x=1\ndd if=/dev/sda of=y"}, want: `blocked pattern "dd if="`},
		{name: "any command when list empty", p: Policy{}, task: Task{Type: "shell", Command: "anything"}},
		{name: "noop needs no command", p: p, task: Task{Type: "noop"}},
		{name: "video needs no command and is not an allowed command", p: Policy{Types: []string{"video"}, AllowedCommands: []string{"python"}}, task: Task{Type: "video"}},
		{name: "video not run without being listed", p: p, task: Task{Type: "video"}, want: `task type "video" is not run by this agent`},
		{name: "command required", p: p, task: Task{Type: "shell"}, want: `command is required for type "shell"`},
		{name: "type not run", p: Policy{Types: []string{"noop"}}, task: Task{Type: "shell", Command: "x"}, want: `task type "shell" is not run by this agent`},
		{name: "too many args", p: Policy{}, task: Task{Command: "x", Args: make([]string, 257)}, want: "257 args, at most 256 allowed"},
		{name: "long command", p: Policy{}, task: Task{Command: strings.Repeat("x", 4097)}, want: "command is 4097 characters, at most 4096 allowed"},
		{name: "bad env name", p: Policy{}, task: Task{Command: "x", Env: map[string]string{"A-B": "1"}}, want: `env name "A-B" is invalid`},
		{name: "NUL in arg", p: Policy{}, task: Task{Command: "x", Args: []string{"a\x00b"}}, want: "arg 0 contains a NUL byte"},
		{name: "relative workdir", p: Policy{}, task: Task{Command: "x", Workdir: "relative/dir"}, want: `workdir "relative/dir" is not an absolute path`},
		{name: "workdir upward", p: Policy{}, task: Task{Command: "x", Workdir: "../../.."}, want: `workdir "../../.." is not an absolute path`},
		{name: "noop relative workdir", p: Policy{}, task: Task{Type: "noop", Workdir: "."}, want: `workdir "." is not an absolute path`},
		{name: "absolute workdir", p: Policy{}, task: Task{Command: "x", Workdir: "/data/run 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Check(tc.task)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want allowed", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrRefused) {
				t.Fatalf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}
