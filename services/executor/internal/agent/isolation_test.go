package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
	"github.com/taskmesh/taskmesh/services/executor/internal/isolation"
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
	// Each task's cgroup is gone with it.
	for _, id := range ids {
		row := h.waitFinal(id, 10*time.Second)
		leftovers, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "*"+safeName(row.AttemptID)+"*"))
		if len(leftovers) > 0 {
			t.Errorf("cgroups left after the task: %v", leftovers)
		}
	}
	// The heartbeat says how tasks are limited.
	hb := h.fake.Calls("SendHeartbeat")
	last := hb[len(hb)-1].Req.(*taskv1.SendHeartbeatRequest)
	if last.GetIsolation() != h.agent.isolation.Mode() || last.GetSlots() != 4 || last.GetVersion() == "" {
		t.Errorf("heartbeat = %v", last)
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
