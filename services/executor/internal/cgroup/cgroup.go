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
// kernel's OOM killer struck (OOMKilled) and removes the group (Remove).
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
		return g, g.writeV2(dir, l)
	}
	for _, c := range []string{Memory, CPU, Pids} {
		parent, ok := h.Parents[c]
		if !ok {
			continue
		}
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", c, err)
		}
		g.Dirs = append(g.Dirs, dir)
		if c == Memory {
			g.MemoryDir = dir
		}
		if err := writeV1(c, dir, l); err != nil {
			_ = Remove(g.Dirs)
			return nil, err
		}
	}
	return g, nil
}

func (g *Group) writeV2(dir string, l Limits) error {
	files := map[string]string{"memory.oom.group": "1"}
	if l.MemoryBytes > 0 {
		files["memory.max"] = strconv.FormatInt(l.MemoryBytes, 10)
		// Swap would let the task exceed its limit, slowly.
		files["memory.swap.max"] = "0"
	}
	if l.CPUMillis > 0 {
		files["cpu.max"] = fmt.Sprintf("%d %d", l.CPUMillis*cpuPeriod/1000, cpuPeriod)
	}
	if l.Pids > 0 {
		files["pids.max"] = strconv.FormatInt(l.Pids, 10)
	}
	for _, f := range sortedKeys(files) {
		if err := write(dir, f, files[f]); err != nil {
			// memory.swap.max is absent without swap accounting; the
			// others are the limits and must hold.
			if f == "memory.swap.max" || f == "memory.oom.group" {
				continue
			}
			_ = Remove([]string{dir})
			return err
		}
	}
	return nil
}

func writeV1(controller, dir string, l Limits) error {
	switch {
	case controller == Memory && l.MemoryBytes > 0:
		if err := write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		// Memory plus swap capped at the same: no escape into swap. Absent
		// without swap accounting, which is fine.
		_ = write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
	case controller == CPU && l.CPUMillis > 0:
		if err := write(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return err
		}
		return write(dir, "cpu.cfs_quota_us", strconv.FormatInt(l.CPUMillis*cpuPeriod/1000, 10))
	case controller == Pids && l.Pids > 0:
		return write(dir, "pids.max", strconv.FormatInt(l.Pids, 10))
	}
	return nil
}

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: set %s: %w", file, err)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
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

// Remove kills whatever is left in the group (processes that left the
// task's process group) and removes its directories, waiting up to a few
// seconds for the kernel to let them go.
func Remove(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		deadline := time.Now().Add(5 * time.Second)
		for {
			killAll(d)
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", d, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// killAll SIGKILLs every process listed in dir's cgroup.procs.
func killAll(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
