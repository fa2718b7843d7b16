// Package isolation decides how the agent confines each task
// (docs/executor.md, "Resource limits and isolation"): the task's
// resources (memory, CPU cores, processes) in a cgroup of its own when the
// agent can make cgroups, else an address-space rlimit with a warning; and
// optionally a bubblewrap sandbox in which the task runs as an
// unprivileged user that sees the system read-only, can write only its
// work directory, its temporary directory and the listed paths, and sees
// neither the agent's data directory (journal, run directories) nor its
// token.
package isolation

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// Modes a Limiter reports (heartbeats, `agents get`).
const (
	ModeCgroupV2 = "cgroup-v2"
	ModeCgroupV1 = "cgroup-v1"
	ModeRlimit   = "rlimit"
)

// Sandbox types.
const (
	SandboxNone  = "none"
	SandboxBwrap = "bwrap"
)

// Sandbox is the agent's isolation block (docs/executor.md,
// isolation: {enabled, type, user, readonly_paths, writable_paths}).
type Sandbox struct {
	Enabled bool
	// Type is none or bwrap.
	Type string
	// User the task runs as (default nobody).
	User string
	// ReadonlyPaths are bound read-only (default /usr, /bin, /sbin, /lib,
	// /lib64, /etc; those missing are skipped).
	ReadonlyPaths []string
	// WritablePaths are bound read-write, besides the task's work and
	// temporary directories.
	WritablePaths []string
}

// DefaultReadonlyPaths are the system paths a sandboxed task sees.
var DefaultReadonlyPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"}

// Config configures New.
type Config struct {
	// Name names the agent's cgroup directory (e.g. "taskmesh-gpu-17").
	Name string
	// NoCgroups forces rlimits (tests, hosts where cgroups are managed
	// elsewhere).
	NoCgroups bool
	// SpareGroups is how many idle cgroups of settled attempts are kept
	// for later attempts (Recycle); 0 removes each with its attempt.
	SpareGroups int
	// Host is the system looked at (zero: this one).
	Host    cgroup.Host
	Sandbox Sandbox
	// Hidden are files and directories a sandboxed task must not see even
	// when a bound path holds them (the token file, the data directory).
	Hidden []string
	Logger *slog.Logger
}

// Limiter confines tasks. Its methods are safe for concurrent use.
type Limiter struct {
	mode     string
	warnings []string
	hier     *cgroup.Hierarchy
	sandbox  Sandbox
	bwrap    string
	uid, gid uint32
	hidden   []string
	groups   groupPool
}

// New detects what this host allows and logs it; a cgroup hierarchy that
// cannot be used is not an error (rlimits and a warning take over), a
// sandbox that was asked for and cannot be had is.
func New(cfg Config) (*Limiter, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Limiter{mode: ModeRlimit, hidden: cfg.Hidden, groups: groupPool{max: cfg.SpareGroups, lent: map[string]*cgroup.Group{}}}
	switch h, err := detect(cfg); {
	case err != nil:
		l.warnings = append(l.warnings, "no cgroups ("+err.Error()+"): a task's memory is limited by RLIMIT_AS only, its CPU and process count not at all")
	default:
		l.hier, l.mode = h, ModeCgroupV1
		if h.Version == 2 {
			l.mode = ModeCgroupV2
		}
		if len(h.Missing) > 0 {
			l.warnings = append(l.warnings, "cgroup controllers missing ("+strings.Join(h.Missing, ", ")+"): those limits are not enforced")
		}
	}
	if err := l.setSandbox(cfg.Sandbox); err != nil {
		return nil, err
	}
	if !l.Sandboxed() {
		l.warnings = append(l.warnings, "no sandbox: tasks run as the agent's user and see its files")
	}
	for _, w := range l.warnings {
		log.Warn("task isolation degraded", "warning", w)
	}
	log.Info("task isolation", "mode", l.mode, "sandbox", l.Sandboxed())
	return l, nil
}

func detect(cfg Config) (*cgroup.Hierarchy, error) {
	if cfg.NoCgroups {
		return nil, fmt.Errorf("turned off")
	}
	name := cfg.Name
	if name == "" {
		name = "taskmesh"
	}
	return cgroup.Detect(cfg.Host, name)
}

func (l *Limiter) setSandbox(s Sandbox) error {
	if !s.Enabled || s.Type == "" || s.Type == SandboxNone {
		return nil
	}
	if s.Type != SandboxBwrap {
		return fmt.Errorf("isolation type %q: want none or bwrap", s.Type)
	}
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return fmt.Errorf("isolation type bwrap: bubblewrap is not installed (apt-get install -y bubblewrap): %w", err)
	}
	name := s.User
	if name == "" {
		name = "nobody"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("isolation user %q: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		return fmt.Errorf("isolation user %q (uid %s): want an unprivileged user", name, u.Uid)
	}
	if len(s.ReadonlyPaths) == 0 {
		s.ReadonlyPaths = DefaultReadonlyPaths
	}
	for _, p := range append(slices.Clone(s.ReadonlyPaths), s.WritablePaths...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("isolation path %q: want an absolute path", p)
		}
	}
	l.sandbox, l.bwrap, l.uid, l.gid = s, path, uint32(uid), uint32(gid)
	return nil
}

// Mode is how tasks' resources are limited: cgroup-v2, cgroup-v1 or rlimit.
func (l *Limiter) Mode() string {
	if l == nil {
		return ModeRlimit
	}
	return l.mode
}

// Warnings say what runs degraded.
func (l *Limiter) Warnings() []string {
	if l == nil {
		return nil
	}
	return slices.Clone(l.warnings)
}

// Close removes the spare cgroups, then the agent's cgroup directories
// when no task uses them.
func (l *Limiter) Close() {
	if l != nil && l.hier != nil {
		l.groups.close()
		l.hier.Release()
	}
}

// Sandboxed reports whether tasks run in the bubblewrap sandbox.
func (l *Limiter) Sandboxed() bool { return l != nil && l.bwrap != "" }

// Cgroup makes the cgroup of one attempt with the task's resources; nil
// without cgroups (Rlimit then gives the memory limit). An attempt with
// no resources still gets a group when cgroups are there: its OOM kills
// are then the machine's, and its leftovers are reaped with it.
//
// A spare group (Recycle) is taken before a new one is made: it keeps the
// name of the attempt that made it.
func (l *Limiter) Cgroup(attemptID string, r Resources) (*cgroup.Group, error) {
	if l == nil || l.hier == nil {
		return nil, nil
	}
	limits := cgroup.Limits{MemoryBytes: r.MemoryBytes, CPUMillis: r.CPUMillis, Pids: r.Pids}
	for g := l.groups.take(attemptID); g != nil; g = l.groups.take(attemptID) {
		if err := g.Reuse(limits); err == nil {
			return g, nil
		}
		l.groups.giveBack(attemptID, nil)
		_ = cgroup.Remove(g.Dirs)
	}
	g, err := l.hier.Create(attemptID, limits)
	if err == nil {
		l.groups.lend(g, attemptID)
	}
	return g, err
}

// RlimitAS is the address-space limit standing in for the task's memory
// limit without cgroups (0: none).
func (l *Limiter) RlimitAS(r Resources) int64 {
	if l != nil && l.hier != nil {
		return 0
	}
	return r.MemoryBytes
}

// Credential is the user a sandboxed task runs as (ok false without the
// sandbox).
func (l *Limiter) Credential() (uid, gid uint32, ok bool) {
	if !l.Sandboxed() {
		return 0, 0, false
	}
	return l.uid, l.gid, true
}

// PrepareDir gives the sandbox user a directory the task must write (its
// default work directory, its temporary directory); without the sandbox it
// does nothing.
func (l *Limiter) PrepareDir(dir string) error {
	if !l.Sandboxed() {
		return nil
	}
	if err := os.Chown(dir, int(l.uid), int(l.gid)); err != nil {
		return fmt.Errorf("sandbox: give %s to the task's user: %w", dir, err)
	}
	return nil
}

// Traversable lets the sandbox user pass through dir (search, not list:
// mode |= 0o011) so that bubblewrap, which runs as that user, reaches the
// task's directories inside it; the directory's other contents stay out
// of the sandbox (only the task's paths are bound) and keep their own
// modes. Without the sandbox it does nothing.
func (l *Limiter) Traversable(dir string) error {
	if !l.Sandboxed() {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
		return fmt.Errorf("sandbox: let the task's user through %s: %w", dir, err)
	}
	return nil
}

// Wrap returns argv run inside the sandbox, with workdir and writable (the
// task's temporary directory and progress file directory) bound
// read-write; without the sandbox it returns argv.
func (l *Limiter) Wrap(argv []string, workdir string, writable ...string) []string {
	if !l.Sandboxed() {
		return argv
	}
	out := []string{l.bwrap,
		// Die with the shim's wrapper; keep the shim's process group, so
		// its stop signals reach the task (no --new-session: the task has
		// no terminal to escape through, its stdin is /dev/null).
		"--die-with-parent", "--unshare-ipc", "--unshare-uts",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}
	for _, p := range l.sandbox.ReadonlyPaths {
		out = append(out, "--ro-bind-try", p, p)
	}
	writes := append(append([]string{workdir}, writable...), l.sandbox.WritablePaths...)
	// What must stay unseen although a bound path holds it (a token file
	// under /etc, the data directory under a writable path): /dev/null
	// over files, an empty tmpfs over directories. Masks come before the
	// task's own binds, which may lie inside a masked directory (the
	// default work root is in the data directory).
	for _, h := range l.hidden {
		if !under(h, l.sandbox.ReadonlyPaths) && !under(h, writes) {
			continue
		}
		if fi, err := os.Stat(h); err == nil && fi.IsDir() {
			out = append(out, "--tmpfs", h)
		} else if err == nil {
			out = append(out, "--ro-bind", "/dev/null", h)
		}
	}
	for _, p := range writes {
		out = append(out, "--bind-try", p, p)
	}
	return append(append(out, "--chdir", workdir, "--"), argv...)
}

// under reports whether path is one of dirs or inside one of them.
func under(path string, dirs []string) bool {
	path = filepath.Clean(path)
	for _, d := range dirs {
		d = filepath.Clean(d)
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) || d == "/" {
			return true
		}
	}
	return false
}
