// Package policy decides whether this agent may run a task at all: the
// task type, the command allow-list and blocked patterns
// (docs/executor.md#policy), and the size limits of the task API
// (docs/api/tasks.md#taskspec). It is pure: the agent asks it
// before a task gets a run directory or a process, for server and local
// tasks alike, so a refused task never starts.
package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Task types the agent knows.
const (
	TypeShell  = "shell"
	TypePython = "python"
	TypeScript = "script"
	TypeNoop   = "noop"
	// TypeVideo renders a video with the executor's own runner; it has no
	// command, so allowed_commands and blocked patterns do not apply.
	TypeVideo = "video"
)

// Size limits, the same as the task API's validation (task.proto TaskSpec),
// so a task the server accepted is never refused here for its size.
const (
	MaxCommandChars = 4096
	MaxArgs         = 256
	MaxArgChars     = 8192
	MaxEnvPairs     = 128
	MaxEnvKeyChars  = 256
	MaxEnvValChars  = 8192
	MaxWorkdirChars = 500
	MaxNameChars    = 255
)

// ErrRefused matches every refusal (errors.Is), so callers can tell a
// policy decision (the task fails, nothing ran) from an internal error.
var ErrRefused = errors.New("refused")

// Refusal is the error Check returns; its message is the reason alone, as
// it is reported in the task's error field.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

// Is makes errors.Is(err, ErrRefused) true for every refusal.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// Policy holds the agent's configured restrictions.
type Policy struct {
	// Types the agent runs; empty means the four built-in types.
	Types []string
	// AllowedCommands lists command base names ("python", "nvidia-smi");
	// empty allows any command. Scripts run as "sh".
	AllowedCommands []string
	// BlockedPatterns are substrings refused anywhere in the command line
	// (command and args joined by spaces) or in a script body.
	BlockedPatterns []string
}

// Task is what the policy looks at.
type Task struct {
	Type    string
	Command string
	Args    []string
	Env     map[string]string
	Workdir string
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// NormalizeType maps the empty type to shell, as the task API does.
func NormalizeType(t string) string {
	if t == "" {
		return TypeShell
	}
	return t
}

// Check returns nil if the task may run, or an error wrapping ErrRefused
// whose message says why (e.g. `command "rm" is not in allowed_commands`).
func (p Policy) Check(t Task) error {
	typ := NormalizeType(t.Type)
	types := p.Types
	if len(types) == 0 {
		types = []string{TypeShell, TypePython, TypeScript, TypeNoop}
	}
	if !slices.Contains(types, typ) {
		return refuse("task type %q is not run by this agent", typ)
	}
	if err := checkSizes(t); err != nil {
		return err
	}
	if typ == TypeNoop || typ == TypeVideo {
		return nil
	}
	if strings.TrimSpace(t.Command) == "" {
		return refuse("command is required for type %q", typ)
	}
	name := "sh"
	if typ != TypeScript {
		name = filepath.Base(t.Command)
	}
	if len(p.AllowedCommands) > 0 && !slices.Contains(p.AllowedCommands, name) {
		return refuse("command %q is not in allowed_commands", name)
	}
	line := t.Command
	if len(t.Args) > 0 {
		line += " " + strings.Join(t.Args, " ")
	}
	for _, pat := range p.BlockedPatterns {
		if pat != "" && strings.Contains(line, pat) {
			return refuse("blocked pattern %q", pat)
		}
	}
	return nil
}

func checkSizes(t Task) error {
	if n := utf8.RuneCountInString(t.Command); n > MaxCommandChars {
		return refuse("command is %d characters, at most %d allowed", n, MaxCommandChars)
	}
	if strings.ContainsRune(t.Command, 0) {
		return refuse("command contains a NUL byte")
	}
	if len(t.Args) > MaxArgs {
		return refuse("%d args, at most %d allowed", len(t.Args), MaxArgs)
	}
	for i, a := range t.Args {
		if utf8.RuneCountInString(a) > MaxArgChars {
			return refuse("arg %d is longer than %d characters", i, MaxArgChars)
		}
		if strings.ContainsRune(a, 0) {
			return refuse("arg %d contains a NUL byte", i)
		}
	}
	if len(t.Env) > MaxEnvPairs {
		return refuse("%d env variables, at most %d allowed", len(t.Env), MaxEnvPairs)
	}
	for k, v := range t.Env {
		if len(k) > MaxEnvKeyChars || !envKey.MatchString(k) {
			return refuse("env name %q is invalid", k)
		}
		if utf8.RuneCountInString(v) > MaxEnvValChars || strings.ContainsRune(v, 0) {
			return refuse("env %s: value too long or contains a NUL byte", k)
		}
	}
	if utf8.RuneCountInString(t.Workdir) > MaxWorkdirChars || strings.ContainsRune(t.Workdir, 0) {
		return refuse("workdir is longer than %d characters or contains a NUL byte", MaxWorkdirChars)
	}
	// A relative workdir would be resolved against whatever directory the
	// process starts from (the agent's own); the task API requires an
	// absolute one too (docs/api/tasks.md#taskspec).
	if t.Workdir != "" && !filepath.IsAbs(t.Workdir) {
		return refuse("workdir %q is not an absolute path", t.Workdir)
	}
	return nil
}

func refuse(format string, a ...any) error {
	return &Refusal{Reason: fmt.Sprintf(format, a...)}
}
