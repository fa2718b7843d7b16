package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
	"github.com/taskmesh/taskmesh/services/executor/internal/isolation"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

// allocMemory makes the test binary a task that allocates and touches the
// given number of MiB, then reports it.
const allocMemory = "alloc-memory"

func allocate(mib string) int {
	n, err := strconv.Atoi(mib)
	if err != nil {
		return 2
	}
	chunks := make([][]byte, 0, n)
	for range n {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page: only touched memory counts
		}
		chunks = append(chunks, b)
	}
	fmt.Printf("allocated %d MiB\n", len(chunks))
	return 0
}

// requireCgroups fails on a root Linux host without usable cgroups (the
// agent would fall back to rlimits), and skips where the test cannot make
// cgroups at all.
func requireCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	h, err := cgroup.Detect(cgroup.Host{}, "taskmesh-test-probe")
	if err != nil {
		t.Fatalf("running as root but no usable cgroups: %v", err)
	}
	h.Release()
}

// A task over its resources.memory is killed by the kernel in its own
// cgroup and reported as out of memory; one within it completes.
func TestTaskOverItsMemoryLimitIsReportedOutOfMemory(t *testing.T) {
	requireCgroups(t)
	h := newHarness(t, nil).start()
	if mode := h.agent.isolation.Mode(); mode != isolation.ModeCgroupV1 && mode != isolation.ModeCgroupV2 {
		t.Fatalf("isolation mode %s, want a cgroup", mode)
	}
	over := &taskv1.Task{Name: "hog", Type: "shell", Command: os.Args[0], Args: []string{allocMemory, "256"}, Timeout: 60,
		Resources: map[string]string{"memory": "64Mi", "cpu": "500m", "pids": "64", "nvidia.com/gpu": "1"}}
	within := &taskv1.Task{Name: "small", Type: "shell", Command: os.Args[0], Args: []string{allocMemory, "16"}, Timeout: 60,
		Resources: map[string]string{"memory": "256Mi"}}
	ids := h.fake.Add(over, within)
	done := h.fake.WaitComplete(t, ids[0], 30*time.Second)
	if done.GetExitCode() == 0 || !strings.Contains(done.GetError(), "out of memory") || !strings.Contains(done.GetError(), "64Mi") {
		t.Errorf("the hog's outcome: exit %d, error %q; want out of memory", done.GetExitCode(), done.GetError())
	}
	ok := h.fake.WaitComplete(t, ids[1], 30*time.Second)
	if ok.GetExitCode() != 0 || ok.GetError() != "" || !strings.Contains(ok.GetStdout(), "allocated 16 MiB") {
		t.Errorf("the small task's outcome: exit %d, error %q, stdout %q", ok.GetExitCode(), ok.GetError(), ok.GetStdout())
	}
	// The hog's cgroup, where the OOM killer struck, is gone with it; the
	// small task's may be kept, empty, for a later task.
	hog := h.waitFinal(ids[0], 10*time.Second)
	leasetest.WaitFor(t, 10*time.Second, "the hog's cgroup removed", func() bool {
		return len(cgroupDirs(t, safeName(hog.AttemptID))) == 0
	})
	small := h.waitFinal(ids[1], 10*time.Second)
	for _, d := range cgroupDirs(t, safeName(small.AttemptID)) {
		if procs := read(t, filepath.Join(d, "cgroup.procs")); strings.TrimSpace(procs) != "" {
			t.Errorf("processes left in %s after the task: %q", d, procs)
		}
	}
	// The heartbeat says how tasks are limited.
	hb := h.fake.Calls("SendHeartbeat")
	last := hb[len(hb)-1].Req.(*taskv1.SendHeartbeatRequest)
	if last.GetIsolation() != h.agent.isolation.Mode() || last.GetSlots() != 4 || last.GetVersion() == "" {
		t.Errorf("heartbeat = %v", last)
	}
	// Once the agent has stopped, no cgroup of either task is left.
	h.stop()
	for _, row := range []journal.Task{hog, small} {
		if left := cgroupDirs(t, safeName(row.AttemptID)); len(left) > 0 {
			t.Errorf("cgroups left after the agent stopped: %v", left)
		}
	}
}

// cgroupLimits makes the test binary a task that prints its memory
// cgroup and that group's memory and CPU limits.
const cgroupLimits = "cgroup-limits"

func printCgroupLimits() int {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		fmt.Println(err)
		return 2
	}
	paths := map[string]string{} // controller → the group's path ("" on v2)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
			for _, c := range strings.Split(parts[1], ",") {
				paths[c] = parts[2]
			}
		}
	}
	var memDir, memFile, cpuFile string
	if p, ok := paths["memory"]; ok {
		memDir, memFile = filepath.Join("/sys/fs/cgroup/memory", p), "memory.limit_in_bytes"
		cpuFile = filepath.Join("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.cfs_quota_us")
	} else {
		memDir, memFile = filepath.Join("/sys/fs/cgroup", paths[""]), "memory.max"
		cpuFile = filepath.Join(memDir, "cpu.max")
	}
	m, _ := os.ReadFile(filepath.Join(memDir, memFile))
	c, _ := os.ReadFile(cpuFile)
	fmt.Printf("group=%s memory=%s cpu=%s\n", filepath.Base(memDir), strings.TrimSpace(string(m)), strings.TrimSpace(string(c)))
	return 0
}

// cgroupDirs finds the cgroup directories named name anywhere under
// /sys/fs/cgroup.
func cgroupDirs(t *testing.T, name string) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == name {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// A settled attempt's cgroup, emptied, serves the next task with that
// task's limits written over its own; a group where the OOM killer struck
// is removed instead, and the next task gets a new one. None is left once
// the agent stops.
func TestCgroupsAreReusedWithTheNextTasksLimits(t *testing.T) {
	requireCgroups(t)
	h := newHarness(t, func(c *Config) { c.Slots = 1 }).start()
	limitsOf := func(task *taskv1.Task) (group, memory, cpu string) {
		t.Helper()
		id := h.fake.Add(task)[0]
		done := h.fake.WaitComplete(t, id, 30*time.Second)
		if done.GetExitCode() != 0 {
			t.Fatalf("%s: exit %d, error %q, stdout %q", task.GetName(), done.GetExitCode(), done.GetError(), done.GetStdout())
		}
		for _, f := range strings.Fields(done.GetStdout()) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "group":
				group = v
			case "memory":
				memory = v
			case "cpu":
				cpu = v
			}
		}
		return group, memory, cpu
	}
	waitSpares := func(n int) {
		t.Helper()
		leasetest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d spare cgroups", n), func() bool { return h.agent.isolation.SpareGroups() == n })
	}
	limited := &taskv1.Task{Name: "limited", Type: "shell", Command: os.Args[0], Args: []string{cgroupLimits}, Timeout: 60,
		Resources: map[string]string{"memory": "64Mi", "cpu": "500m"}}
	first, mem, cpu := limitsOf(limited)
	if mem != strconv.Itoa(64<<20) || (cpu != "50000" && cpu != "50000 100000") {
		t.Errorf("the first task's limits: memory %q, cpu %q", mem, cpu)
	}
	waitSpares(1)
	plain := &taskv1.Task{Name: "plain", Type: "shell", Command: os.Args[0], Args: []string{cgroupLimits}, Timeout: 60}
	second, mem, cpu := limitsOf(plain)
	if second != first {
		t.Errorf("the second task ran in group %q, want the first one's %q", second, first)
	}
	if (mem != "max" && len(mem) < 18) || (cpu != "-1" && cpu != "max 100000") {
		t.Errorf("the second task's limits: memory %q, cpu %q; want none", mem, cpu)
	}
	waitSpares(1)

	hog := h.fake.Add(&taskv1.Task{Name: "hog", Type: "shell", Command: os.Args[0], Args: []string{allocMemory, "256"}, Timeout: 60,
		Resources: map[string]string{"memory": "64Mi"}})[0]
	if done := h.fake.WaitComplete(t, hog, 30*time.Second); !strings.Contains(done.GetError(), "out of memory") {
		t.Fatalf("the hog's outcome: exit %d, error %q", done.GetExitCode(), done.GetError())
	}
	waitSpares(0)
	leasetest.WaitFor(t, 10*time.Second, "the group the OOM killer struck in removed", func() bool {
		return len(cgroupDirs(t, first)) == 0
	})
	third, _, _ := limitsOf(plain)
	t.Logf("groups: %s, %s, then %s", first, second, third)
	if third == first {
		t.Errorf("the task after the hog ran in the hog's group %q", third)
	}
	waitSpares(1)
	h.stop()
	if left := cgroupDirs(t, third); len(left) > 0 {
		t.Errorf("cgroups left after the agent stopped: %v", left)
	}
}

// Without cgroups the memory limit is an address-space rlimit, and the
// agent says so in its heartbeat.
func TestWithoutCgroupsMemoryIsAnRlimitWithAWarning(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.NoCgroups = true }).start()
	ids := h.fake.Add(&taskv1.Task{Name: "hog", Type: "shell", Command: os.Args[0], Args: []string{allocMemory, "512"}, Timeout: 60,
		Resources: map[string]string{"memory": "64Mi"}})
	done := h.fake.WaitComplete(t, ids[0], 30*time.Second)
	if done.GetExitCode() == 0 {
		t.Errorf("a task past its RLIMIT_AS completed: %v", done)
	}
	leasetest.WaitFor(t, 15*time.Second, "a heartbeat saying rlimit, with a warning", func() bool {
		hb := h.fake.Calls("SendHeartbeat")
		if len(hb) == 0 {
			return false
		}
		req := hb[len(hb)-1].Req.(*taskv1.SendHeartbeatRequest)
		return req.GetIsolation() == isolation.ModeRlimit && len(req.GetWarnings()) > 0 &&
			strings.Contains(strings.Join(req.GetWarnings(), " "), "RLIMIT_AS")
	})
}

// In the bubblewrap sandbox a task runs as nobody, sees the system read
// only, writes only its work directory, and sees neither the agent's token
// file (even inside a path it may read) nor its journal, which the
// agent-local API refuses to show it.
func TestSandboxedTaskCannotReadTheTokenOrWriteOutsideItsWorkdir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox runs tasks as another user, which needs root")
	}
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Fatal("bubblewrap is not installed (apt-get install -y bubblewrap)")
	}
	secrets := shortDir(t)
	token := filepath.Join(secrets, "agent-token")
	if err := os.Chmod(secrets, 0o755); err != nil {
		t.Fatal(err)
	}
	// World-readable on purpose: the sandbox must hide it, not rely on
	// its mode.
	if err := os.WriteFile(token, []byte("agent-token-123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := shortDir(t)
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	var dataDir string
	h := newHarness(t, func(c *Config) {
		c.TokenFile = token
		c.Sandbox = isolation.Sandbox{Enabled: true, Type: isolation.SandboxBwrap, User: "nobody",
			ReadonlyPaths: append([]string{secrets}, isolation.DefaultReadonlyPaths...)}
		c.LocalAPIAddr = "127.0.0.1:0"
		dataDir = c.DataDir
	}).start()
	host, port, _ := strings.Cut(h.agent.LocalAPIAddr(), ":")
	// The agent-local API on loopback, which a sandboxed task shares: asked
	// for the journal's tasks, it answers the sandbox's user 403.
	local := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/%s/%s && printf "GET /api/v1/tasks HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 && head -1 <&3' | sed 's/^/LOCAL API /'`, host, port)
	body := fmt.Sprintf(local+`
id -u
cat %[1]s && echo "READ THE TOKEN"
ls %[2]s/journal.db && echo "SAW THE JOURNAL"
echo x > /etc/taskmesh-sandbox-test && echo "WROTE /etc"
echo x > %[3]s/escaped && echo "WROTE OUTSIDE"
echo inside > "$PWD/inside.txt" && echo "wrote the workdir"
echo 50 half > "$TASKMESH_PROGRESS_FILE" && echo "wrote progress" && sleep 2
echo tmp > "$TMPDIR/t" && echo "wrote tmp"
exit 0
`, token, dataDir, outside)
	ids := h.fake.Add(script(body))
	done := h.fake.WaitComplete(t, ids[0], 30*time.Second)
	out := done.GetStdout() + done.GetStderr()
	if done.GetExitCode() != 0 {
		t.Fatalf("sandboxed task: exit %d: %s", done.GetExitCode(), out)
	}
	for _, bad := range []string{"READ THE TOKEN", "agent-token-123", "SAW THE JOURNAL", "WROTE /etc", "WROTE OUTSIDE"} {
		if strings.Contains(done.GetStdout(), bad) {
			t.Errorf("the sandboxed task printed %q:\n%s", bad, out)
		}
	}
	for _, good := range []string{"65534", "wrote the workdir", "wrote progress", "wrote tmp", "LOCAL API HTTP/1.0 403"} {
		if !strings.Contains(done.GetStdout(), good) {
			t.Errorf("the sandboxed task did not print %q:\n%s", good, out)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
		t.Error("the task wrote outside its work directory")
	}
	if _, err := os.Stat("/etc/taskmesh-sandbox-test"); err == nil {
		os.Remove("/etc/taskmesh-sandbox-test")
		t.Error("the task wrote /etc")
	}
	inside := filepath.Join(dataDir, "work", safeName(ids[0]), "inside.txt")
	if b, err := os.ReadFile(inside); err != nil || strings.TrimSpace(string(b)) != "inside" {
		t.Errorf("the work directory file: %q, %v", b, err)
	}
	// The agent authenticates with the token at debug level and never
	// logs it.
	if strings.Contains(h.logs.String(), "agent-token-123") {
		t.Error("the agent's token appears in its log")
	}
	// The agent reported the progress the task wrote in its file.
	reported := false
	for _, c := range h.fake.Calls("ReportTaskProgress") {
		if p := c.Req.(*taskv1.ReportTaskProgressRequest); p.GetProgress() == 50 && p.GetMessage() == "half" {
			reported = true
		}
	}
	if !reported {
		t.Errorf("no progress 50 %q reported from the sandboxed task's progress file", "half")
	}
}

// Spare cgroups an agent kept when it stopped without closing are
// removed when it starts again: those named after an attempt of its
// journal that is over. A group named after no attempt of its own is not
// its to remove.
func TestStaleSpareCgroupsAreRemovedAtStart(t *testing.T) {
	requireCgroups(t)
	h := newHarness(t, nil).start()
	id := h.fake.Add(shell("/bin/true"))[0]
	h.fake.WaitComplete(t, id, 30*time.Second)
	row := h.waitFinal(id, 10*time.Second)
	h.stop()

	// What a killed agent leaves: its spares, and here also a group that
	// is not its own, in the same parents.
	hier, err := cgroup.Detect(cgroup.Host{}, "taskmesh-"+safeName(h.cfg.AgentID))
	if err != nil {
		t.Fatal(err)
	}
	spare, err := hier.Create(safeName(row.AttemptID), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := hier.Create("not-an-attempt-"+strconv.Itoa(os.Getpid()), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cgroup.Remove(other.Dirs) })

	h.start()
	leasetest.WaitFor(t, 10*time.Second, "the stale spare removed", func() bool {
		for _, d := range spare.Dirs {
			if _, err := os.Stat(d); err == nil {
				return false
			}
		}
		return true
	})
	for _, d := range other.Dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a group that is not the agent's was touched: %v", err)
		}
	}
}
