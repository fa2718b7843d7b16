// Package cgroup makes a control group per task, on cgroup v2 where the
// host has it with the memory, cpu and pids controllers, else on the v1
// hierarchies of those controllers (hybrid hosts mount v1 controllers
// under /sys/fs/cgroup/<controller> and a v2 tree with few or no
// controllers at /sys/fs/cgroup/unified). Which one is detected from
// /proc/self/mountinfo and the controllers the trees offer, never assumed.
//
// A task's cgroup is made by the agent with the task's limits before the
// task's shim starts; the task joins it itself, before exec (the shim's
// exec trampoline writes its own pid to each cgroup.procs), so no task
// code runs outside it; when the task has ended the shim reads whether the
// kernel's OOM killer struck (OOMKilled) and removes the group (Remove),
// or empties it (Empty) for the agent to give to a later task (Idle,
// Reuse).
// The rules are in docs/executor.md ("Resource limits and isolation").
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Controllers a task's limits use.
const (
	Memory = "memory"
	CPU    = "cpu"
	Pids   = "pids"
)

// Limits are one task's limits; 0 leaves a resource unlimited.
type Limits struct {
	MemoryBytes int64
	// CPUMillis is CPU time per wall second in thousandths of a core
	// (1500 = one and a half cores).
	CPUMillis int64
	Pids      int64
}

// cpuPeriod is the CFS period limits are expressed in (100 ms, the
// kernel's default).
const cpuPeriod = 100_000

// Hierarchy is where an agent makes its tasks' cgroups.
type Hierarchy struct {
	// Version is 1 or 2.
	Version int
	// Parents are the directories task cgroups are made in: one (key "")
	// on v2, one per controller on v1.
	Parents map[string]string
	// Missing names controllers the host does not offer here; their limits
	// are not enforced.
	Missing []string
}

// Host describes the system Detect looks at; the zero value is the
// running system (tests point it at a directory tree of their own).
type Host struct {
	// Root prefixes every path (default "/").
	Root string
	// Mountinfo and SelfCgroup are the contents of /proc/self/mountinfo
	// and /proc/self/cgroup (default: read from Root).
	Mountinfo, SelfCgroup []byte
}

func (h Host) path(p string) string {
	if h.Root == "" {
		return p
	}
	return filepath.Join(h.Root, p)
}

func (h Host) read(p string, given []byte) ([]byte, error) {
	if given != nil {
		return given, nil
	}
	return os.ReadFile(h.path(p))
}

// mount is one cgroup file system.
type mount struct {
	dir     string
	v2      bool
	options []string // v1: the controllers it holds
}

// Detect finds where tasks' cgroups can be made, under a directory named
// name in the agent's own cgroup, and prepares it. It returns an error
// saying why when neither version can limit memory here; callers fall
// back to rlimits.
func Detect(host Host, name string) (*Hierarchy, error) {
	mi, err := host.read("/proc/self/mountinfo", host.Mountinfo)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	self, err := host.read("/proc/self/cgroup", host.SelfCgroup)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	mounts := parseMountinfo(mi)
	paths := parseSelfCgroup(self)
	var errs []error
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		h, err := detectV2(host, m, paths[""], name)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err)
	}
	h, err := detectV1(host, mounts, paths, name)
	if err == nil {
		return h, nil
	}
	return nil, errors.Join(append(errs, err)...)
}

// parseMountinfo returns the cgroup mounts of a mountinfo text.
func parseMountinfo(b []byte) []mount {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, pf := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(pf) < 3 {
			continue
		}
		switch pf[0] {
		case "cgroup2":
			out = append(out, mount{dir: unescape(f[4]), v2: true})
		case "cgroup":
			out = append(out, mount{dir: unescape(f[4]), options: strings.Split(pf[2], ",")})
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseSelfCgroup maps each controller (and "" for v2) to this process's
// cgroup path.
func parseSelfCgroup(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// 4:memory:/a/b   0::/a/b   1:cpu,cpuacct:/
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// detectV2 prepares a v2 tree: the task cgroups' parent must be able to
// enable memory, cpu and pids for its children, and (the rule of no
// internal processes) hold no process itself. Under the root it is a new
// child of the root; inside the agent's own cgroup (a delegated systemd
// unit) the agent first moves itself into a leaf of its own.
func detectV2(host Host, m mount, self, name string) (*Hierarchy, error) {
	root := host.path(m.dir)
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 at %s: %w", m.dir, err)
	}
	have := strings.Fields(string(avail))
	if !slices.Contains(have, Memory) {
		return nil, fmt.Errorf("cgroup v2 at %s offers no memory controller (it has %q)", m.dir, strings.Join(have, " "))
	}
	own := filepath.Join(root, self)
	if self == "" || self == "/" {
		own = root
	} else {
		// Our cgroup may only enable controllers for children once no
		// process is directly in it: move this process into a leaf.
		leaf := filepath.Join(own, "agent")
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2: move the agent into %s: %w", leaf, err)
		}
	}
	var missing, enable []string
	for _, c := range []string{Memory, CPU, Pids} {
		if slices.Contains(have, c) {
			enable = append(enable, "+"+c)
		} else {
			missing = append(missing, c)
		}
	}
	parent := filepath.Join(own, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	for _, dir := range []string{own, parent} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2: enable %s in %s: %w", strings.Join(enable, " "), dir, err)
		}
	}
	return &Hierarchy{Version: 2, Parents: map[string]string{"": parent}, Missing: missing}, nil
}

// detectV1 prepares a directory named name in this process's cgroup of
// each of the memory, cpu and pids hierarchies; memory is required.
func detectV1(host Host, mounts []mount, self map[string]string, name string) (*Hierarchy, error) {
	h := &Hierarchy{Version: 1, Parents: map[string]string{}}
	for _, c := range []string{Memory, CPU, Pids} {
		i := slices.IndexFunc(mounts, func(m mount) bool { return !m.v2 && slices.Contains(m.options, c) })
		if i < 0 {
			if c == Memory {
				return nil, errors.New("no cgroup v1 memory hierarchy is mounted")
			}
			h.Missing = append(h.Missing, c)
			continue
		}
		parent := filepath.Join(host.path(mounts[i].dir), self[c], name)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			if c == Memory {
				return nil, fmt.Errorf("cgroup v1 memory: %w", err)
			}
			h.Missing = append(h.Missing, c)
			continue
		}
		h.Parents[c] = parent
	}
	return h, nil
}

// Release removes the parents that hold no task cgroup any more (a task
// still running through its shim keeps its parent).
func (h *Hierarchy) Release() {
	for _, p := range h.Parents {
		_ = syscall.Rmdir(p)
	}
}

// Group is one task's cgroup: one directory on v2, one per controller on
// v1. It is what the shim needs (its spec carries it as JSON).
type Group struct {
	Version int `json:"version"`
	// Dirs are the group's directories; the task writes its pid to each
	// one's cgroup.procs.
	Dirs []string `json:"dirs"`
	// MemoryDir holds the memory controller's files.
	MemoryDir string `json:"memory_dir"`
	// Controllers name, on v1, the controller of each of Dirs.
	Controllers []string `json:"controllers,omitempty"`
	// limits are the limits last written to the group by this process;
	// nil when unknown (a group read back from a spec), and Reuse then
	// writes every limit.
	limits *Limits
}

// Create makes the cgroup named name (e.g. the attempt id) with limits.
// An existing group of that name (a retried start) is reused.
func (h *Hierarchy) Create(name string, l Limits) (*Group, error) {
	g := &Group{Version: h.Version}
	if h.Version == 2 {
		dir := filepath.Join(h.Parents[""], name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		g.Dirs, g.MemoryDir = []string{dir}, dir
		// The whole group is killed when the OOM killer strikes in it; a
		// kernel without the file kills the one process.
		_ = write(dir, "memory.oom.group", "1")
	} else {
		for _, c := range []string{Memory, CPU, Pids} {
			parent, ok := h.Parents[c]
			if !ok {
				continue
			}
			dir := filepath.Join(parent, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				_ = Remove(g.Dirs)
				return nil, fmt.Errorf("cgroup %s: %w", c, err)
			}
			g.Dirs, g.Controllers = append(g.Dirs, dir), append(g.Controllers, c)
			if c == Memory {
				g.MemoryDir = dir
			}
		}
	}
	// A new group has no limits.
	if err := g.apply(l, &Limits{}); err != nil {
		_ = Remove(g.Dirs)
		return nil, err
	}
	return g, nil
}

// Reuse gives an idle group (Idle) another task's limits, writing only
// those that differ from the group's own (docs/executor.md, "Cgroups are
// reused"). On error the group's limits are unknown: the caller removes
// it.
func (g *Group) Reuse(l Limits) error {
	return g.apply(l, g.limits)
}

// apply writes the limits of l that differ from prev (nil: every one).
// Unset limits are written as no limit.
func (g *Group) apply(l Limits, prev *Limits) error {
	g.limits = nil
	if g.Version != 2 && len(g.Controllers) != len(g.Dirs) {
		return errors.New("cgroup: the group's controllers are unknown")
	}
	changed := func(now, before int64) bool { return prev == nil || now != before }
	for i, dir := range g.Dirs {
		var err error
		if g.Version == 2 {
			err = applyV2(dir, l, prev, changed)
		} else {
			err = applyV1(g.Controllers[i], dir, l, prev, changed)
		}
		if err != nil {
			return err
		}
	}
	g.limits = &l
	return nil
}

// applyV2 writes a v2 group's limits.
func applyV2(dir string, l Limits, prev *Limits, changed func(now, before int64) bool) error {
	var p Limits
	if prev != nil {
		p = *prev
	}
	if changed(l.MemoryBytes, p.MemoryBytes) {
		max, swap := "max", "max"
		if l.MemoryBytes > 0 {
			// Swap would let the task exceed its limit, slowly.
			max, swap = strconv.FormatInt(l.MemoryBytes, 10), "0"
		}
		if err := write(dir, "memory.max", max); err != nil {
			return err
		}
		// Absent without swap accounting.
		_ = write(dir, "memory.swap.max", swap)
	}
	if changed(l.CPUMillis, p.CPUMillis) {
		quota := "max"
		if l.CPUMillis > 0 {
			quota = strconv.FormatInt(l.CPUMillis*cpuPeriod/1000, 10)
		}
		if err := write(dir, "cpu.max", fmt.Sprintf("%s %d", quota, cpuPeriod)); err != nil && (l.CPUMillis > 0 || !errors.Is(err, os.ErrNotExist)) {
			return err
		}
	}
	if changed(l.Pids, p.Pids) {
		if err := write(dir, "pids.max", limitOrMax(l.Pids)); err != nil && (l.Pids > 0 || !errors.Is(err, os.ErrNotExist)) {
			return err
		}
	}
	return nil
}

// applyV1 writes the limits of one v1 controller's directory.
func applyV1(controller, dir string, l Limits, prev *Limits, changed func(now, before int64) bool) error {
	var p Limits
	if prev != nil {
		p = *prev
	}
	switch {
	case controller == Memory && changed(l.MemoryBytes, p.MemoryBytes):
		// Memory plus swap may never be below memory alone: lift it
		// first. Memory plus swap capped at the memory limit leaves no
		// escape into swap. The file is absent without swap accounting,
		// which is fine.
		if prev == nil || p.MemoryBytes > 0 {
			_ = write(dir, "memory.memsw.limit_in_bytes", "-1")
		}
		if l.MemoryBytes <= 0 {
			return write(dir, "memory.limit_in_bytes", "-1")
		}
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if err := write(dir, "memory.limit_in_bytes", v); err != nil {
			return err
		}
		_ = write(dir, "memory.memsw.limit_in_bytes", v)
	case controller == CPU && changed(l.CPUMillis, p.CPUMillis):
		if l.CPUMillis <= 0 {
			return write(dir, "cpu.cfs_quota_us", "-1")
		}
		if err := write(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return err
		}
		return write(dir, "cpu.cfs_quota_us", strconv.FormatInt(l.CPUMillis*cpuPeriod/1000, 10))
	case controller == Pids && changed(l.Pids, p.Pids):
		return write(dir, "pids.max", limitOrMax(l.Pids))
	}
	return nil
}

func limitOrMax(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: set %s: %w", file, err)
	}
	return nil
}

// Join moves the calling process into the group: the task's first act,
// before it execs. It does not allocate after the paths are built, so it
// is safe between the limits and exec of the shim's trampoline.
func (g *Group) Join() error {
	pid := []byte("0") // "0" is the writing process, in v1 and v2 alike
	for _, d := range g.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), pid, 0); err != nil {
			return fmt.Errorf("cgroup: join %s: %w", d, err)
		}
	}
	return nil
}

// Move moves process pid (all its threads) into the group: the shim's
// traced start does it while the task is stopped at its first
// instruction, which keeps Join's guarantee that no task code runs
// outside the group.
func (g *Group) Move(pid int) error {
	b := []byte(strconv.Itoa(pid))
	for _, d := range g.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), b, 0); err != nil {
			return fmt.Errorf("cgroup: move %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// OOMKilled reports whether the kernel's OOM killer killed a process of
// the group because of its memory limit: memory.events' oom_kill on v2,
// memory.oom_control's oom_kill on v1.
func (g *Group) OOMKilled() (bool, error) {
	if g == nil || g.MemoryDir == "" {
		return false, nil
	}
	file, key := "memory.oom_control", "oom_kill"
	if g.Version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(g.MemoryDir, file))
	if err != nil {
		return false, fmt.Errorf("cgroup: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return err == nil && n > 0, nil
		}
	}
	return false, nil
}

// Idle reports whether the group can serve another task (Reuse): each of
// its directories is there and holds no process, the OOM killer never
// struck in it (memory.events and memory.oom_control count from the
// group's creation, and OOMKilled must see only its task's kills), and
// the memory still charged to it, the page cache and kernel objects its
// tasks left, is at most maxCharged bytes: a next task's limit counts
// that charge until the kernel reclaims it.
func (g *Group) Idle(maxCharged int64) bool {
	if g == nil || len(g.Dirs) == 0 || g.MemoryDir == "" {
		return false
	}
	for _, d := range g.Dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || len(bytes.TrimSpace(b)) > 0 {
			return false
		}
	}
	if oom, err := g.OOMKilled(); err != nil || oom {
		return false
	}
	file := "memory.usage_in_bytes"
	if g.Version == 2 {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(g.MemoryDir, file))
	if err != nil {
		return false
	}
	charged, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return err == nil && charged <= maxCharged
}

// Empty kills whatever is left in the group's directories and waits up to
// a few seconds for the kernel to let it go, leaving the directories for
// another task (Reuse).
func Empty(dirs []string) error {
	return forEachUntil(dirs, "empty", func(d string) error {
		switch left, err := killAll(d); {
		case errors.Is(err, os.ErrNotExist):
			return nil
		case err != nil:
			return err
		case left:
			return errors.New("processes are left in it")
		}
		return nil
	})
}

// Remove kills whatever is left in the group (processes that left the
// task's process group) and removes its directories, waiting up to a few
// seconds for the kernel to let them go.
func Remove(dirs []string) error {
	return forEachUntil(dirs, "remove", func(d string) error {
		_, _ = killAll(d)
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			return err
		}
		return nil
	})
}

// forEachUntil tries step on each directory until it succeeds, every
// 20 ms for up to 5 s per directory.
func forEachUntil(dirs []string, what string, step func(dir string) error) error {
	var errs []error
	for _, d := range dirs {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := step(d)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("cgroup: %s %s: %w", what, d, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// killAll SIGKILLs every process listed in dir's cgroup.procs and says
// whether it listed any (they may take a moment to leave).
func killAll(dir string) (listed bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false, err
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			listed = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return listed, nil
}
