package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A hybrid host like the one the tests run on: v1 controllers, a v2 tree
// without controllers.
const hybridMountinfo = `25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
29 25 0:26 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
30 25 0:27 / /mnt/with\040space rw - cgroup cgroup rw,freezer
`

const hybridSelf = `9:pids:/
4:memory:/process_api/abc
1:cpu,cpuacct:/
0::/
`

// fakeRoot makes the directories a host would have and returns its root.
func fakeRoot(t *testing.T, dirs map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for d, controllers := range dirs {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if controllers != "" {
			if err := os.WriteFile(filepath.Join(p, "cgroup.controllers"), []byte(controllers), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseMountinfoAndSelf(t *testing.T) {
	ms := parseMountinfo([]byte(hybridMountinfo))
	if len(ms) != 5 || !ms[0].v2 || ms[0].dir != "/sys/fs/cgroup/unified" || !slices.Contains(ms[2].options, "cpuacct") ||
		ms[4].dir != "/mnt/with space" {
		t.Errorf("mounts = %+v", ms)
	}
	self := parseSelfCgroup([]byte(hybridSelf))
	if self["memory"] != "/process_api/abc" || self["cpuacct"] != "/" || self[""] != "/" || self["pids"] != "/" {
		t.Errorf("self = %v", self)
	}
}

func TestDetectHybridUsesV1(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"sys/fs/cgroup/unified": " ", "sys/fs/cgroup/memory/process_api/abc": "", "sys/fs/cgroup/cpu,cpuacct": "", "sys/fs/cgroup/pids": "",
	})
	h, err := Detect(Host{Root: root, Mountinfo: []byte(hybridMountinfo), SelfCgroup: []byte(hybridSelf)}, "taskmesh-a")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		Memory: filepath.Join(root, "sys/fs/cgroup/memory/process_api/abc/taskmesh-a"),
		CPU:    filepath.Join(root, "sys/fs/cgroup/cpu,cpuacct/taskmesh-a"),
		Pids:   filepath.Join(root, "sys/fs/cgroup/pids/taskmesh-a"),
	}
	if h.Version != 1 || len(h.Missing) != 0 || len(h.Parents) != 3 {
		t.Fatalf("hierarchy = %+v", h)
	}
	for c, p := range want {
		if h.Parents[c] != p {
			t.Errorf("parent of %s = %s, want %s", c, h.Parents[c], p)
		}
	}
	g, err := h.Create("att-1", Limits{MemoryBytes: 64 << 20, CPUMillis: 1500, Pids: 100})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(want[Memory], "att-1", "memory.limit_in_bytes"): "67108864",
		filepath.Join(want[CPU], "att-1", "cpu.cfs_period_us"):        "100000",
		filepath.Join(want[CPU], "att-1", "cpu.cfs_quota_us"):         "150000",
		filepath.Join(want[Pids], "att-1", "pids.max"):                "100",
	}
	for f, v := range files {
		if got := read(t, f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if len(g.Dirs) != 3 || g.MemoryDir != filepath.Join(want[Memory], "att-1") || g.Version != 1 {
		t.Errorf("group = %+v", g)
	}
}

func TestDetectV2WithControllers(t *testing.T) {
	mi := "26 25 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	root := fakeRoot(t, map[string]string{"sys/fs/cgroup": "cpuset cpu io memory pids", "sys/fs/cgroup/system.slice/agent.service": ""})
	h, err := Detect(Host{Root: root, Mountinfo: []byte(mi), SelfCgroup: []byte("0::/system.slice/agent.service\n")}, "taskmesh-a")
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(root, "sys/fs/cgroup/system.slice/agent.service")
	parent := filepath.Join(own, "taskmesh-a")
	if h.Version != 2 || h.Parents[""] != parent || len(h.Missing) != 0 {
		t.Fatalf("hierarchy = %+v", h)
	}
	// The agent moved itself into a leaf, then enabled the controllers for
	// its children.
	if got := read(t, filepath.Join(own, "agent", "cgroup.procs")); got != strings.TrimSpace(got) || got == "" {
		t.Errorf("agent leaf procs = %q", got)
	}
	for _, d := range []string{own, parent} {
		if got := read(t, filepath.Join(d, "cgroup.subtree_control")); got != "+memory +cpu +pids" {
			t.Errorf("%s subtree_control = %q", d, got)
		}
	}
	g, err := h.Create("att-2", Limits{MemoryBytes: 1 << 30, CPUMillis: 500})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "att-2")
	for f, v := range map[string]string{"memory.max": "1073741824", "memory.swap.max": "0", "cpu.max": "50000 100000", "memory.oom.group": "1"} {
		if got := read(t, filepath.Join(dir, f)); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pids.max")); err == nil {
		t.Error("pids.max written without a pids limit")
	}
	if g.Dirs[0] != dir || g.MemoryDir != dir {
		t.Errorf("group = %+v", g)
	}
}

func TestDetectWithoutMemoryFails(t *testing.T) {
	mi := "26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n28 25 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
	root := fakeRoot(t, map[string]string{"sys/fs/cgroup/unified": "cpu", "sys/fs/cgroup/pids": ""})
	_, err := Detect(Host{Root: root, Mountinfo: []byte(mi), SelfCgroup: []byte("0::/\n")}, "x")
	if err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("err = %v, want one about the memory controller", err)
	}
}

func TestOOMKilled(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		version int
		file    string
		text    string
		want    bool
	}{
		{2, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n", true},
		{2, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", false},
		{1, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", true},
		{1, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", false},
	} {
		if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.text), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := (&Group{Version: tt.version, MemoryDir: dir}).OOMKilled()
		if err != nil || got != tt.want {
			t.Errorf("v%d %q: %v, %v; want %v", tt.version, tt.text, got, err, tt.want)
		}
	}
	if got, err := (*Group)(nil).OOMKilled(); got || err != nil {
		t.Errorf("no group: %v, %v", got, err)
	}
}

// fakeGroup lays out a group's directories as files a test can read: on
// v1 one per controller, with the kernel's initial values.
func fakeGroup(t *testing.T, version int) *Group {
	t.Helper()
	root := t.TempDir()
	g := &Group{Version: version}
	if version == 2 {
		g.Dirs, g.MemoryDir = []string{root}, root
		return g
	}
	for _, c := range []string{Memory, CPU, Pids} {
		d := filepath.Join(root, c)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		g.Dirs, g.Controllers = append(g.Dirs, d), append(g.Controllers, c)
	}
	g.MemoryDir = g.Dirs[0]
	return g
}

// A reused group gets the next task's limits: a limit the task does not
// set is lifted, one it sets is written, and one that is already right is
// not written again.
func TestReuseWritesTheNextTasksLimits(t *testing.T) {
	for _, version := range []int{1, 2} {
		g := fakeGroup(t, version)
		if err := g.apply(Limits{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 10}, &Limits{}); err != nil {
			t.Fatal(err)
		}
		if err := g.Reuse(Limits{CPUMillis: 500}); err != nil {
			t.Fatal(err)
		}
		if version == 2 {
			d := g.Dirs[0]
			if m, c, p := read(t, filepath.Join(d, "memory.max")), read(t, filepath.Join(d, "cpu.max")), read(t, filepath.Join(d, "pids.max")); m != "max" || c != "50000 100000" || p != "max" {
				t.Errorf("v2 after reuse: memory %q, cpu %q, pids %q", m, c, p)
			}
			if s := read(t, filepath.Join(d, "memory.swap.max")); s != "max" {
				t.Errorf("v2 swap after reuse: %q", s)
			}
		} else {
			mem, cpu, pids := g.Dirs[0], g.Dirs[1], g.Dirs[2]
			if m, s := read(t, filepath.Join(mem, "memory.limit_in_bytes")), read(t, filepath.Join(mem, "memory.memsw.limit_in_bytes")); m != "-1" || s != "-1" {
				t.Errorf("v1 memory after reuse: %q, memsw %q", m, s)
			}
			if q, p := read(t, filepath.Join(cpu, "cpu.cfs_quota_us")), read(t, filepath.Join(pids, "pids.max")); q != "50000" || p != "max" {
				t.Errorf("v1 after reuse: cpu quota %q, pids %q", q, p)
			}
		}
		// The CPU limit is unchanged: not written again.
		cpuFile := filepath.Join(g.Dirs[0], "cpu.max")
		if version == 1 {
			cpuFile = filepath.Join(g.Dirs[1], "cpu.cfs_quota_us")
		}
		if err := os.Remove(cpuFile); err != nil {
			t.Fatal(err)
		}
		if err := g.Reuse(Limits{CPUMillis: 500, MemoryBytes: 32 << 20}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(cpuFile); !os.IsNotExist(err) {
			t.Errorf("v%d: an unchanged limit was written again", version)
		}
		// A group read back from a spec has unknown limits: every one is
		// written.
		back := &Group{Version: g.Version, Dirs: g.Dirs, MemoryDir: g.MemoryDir, Controllers: g.Controllers}
		if err := back.Reuse(Limits{CPUMillis: 500}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(cpuFile); err != nil {
			t.Errorf("v%d: a group of unknown limits did not get every limit: %v", version, err)
		}
	}
	// A v1 group whose controllers are unknown is not reused.
	if err := (&Group{Version: 1, Dirs: []string{t.TempDir()}}).Reuse(Limits{}); err == nil {
		t.Error("a v1 group of unknown controllers was reused")
	}
}

// Only an empty group, the OOM killer never struck in and holding little
// memory, is idle.
func TestIdle(t *testing.T) {
	const max = 16 << 20
	for _, tt := range []struct {
		name              string
		procs, oom, usage string
		want              bool
	}{
		{"empty", "", "oom_kill 0\n", "126976\n", true},
		{"a process", "1234\n", "oom_kill 0\n", "126976\n", false},
		{"oom killed", "", "oom_kill 1\n", "126976\n", false},
		{"much memory", "", "oom_kill 0\n", "67108864\n", false},
	} {
		g := fakeGroup(t, 1)
		for _, d := range g.Dirs {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(tt.procs), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(g.MemoryDir, "memory.oom_control"), []byte(tt.oom), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g.MemoryDir, "memory.usage_in_bytes"), []byte(tt.usage), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := g.Idle(max); got != tt.want {
			t.Errorf("%s: idle %v, want %v", tt.name, got, tt.want)
		}
	}
	gone := fakeGroup(t, 1)
	if err := os.RemoveAll(filepath.Dir(gone.Dirs[0])); err != nil {
		t.Fatal(err)
	}
	if gone.Idle(max) || (*Group)(nil).Idle(max) {
		t.Error("a removed group is idle")
	}
}

// Empty waits for a group to have no process and leaves its directory;
// a directory already gone is empty.
func TestEmpty(t *testing.T) {
	dir := t.TempDir()
	procs := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(procs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Empty([]string{dir, filepath.Join(dir, "gone")}); err != nil {
		t.Errorf("empty group: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the directory went: %v", err)
	}
}
