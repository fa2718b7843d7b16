//go:build linux

package pgtest_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskmesh/taskmesh/platform/pgtest"
)

// These tests run this test binary again (TestHelperProcess, selected by
// PGTEST_HELPER) to observe what happens to a whole test package: its exit
// status, its output, and the server it leaves behind. They rely on Linux:
// the parent death signal and /proc.

// TestHelperProcess is the body of the child process; in a normal run it has
// nothing to do and passes.
func TestHelperProcess(t *testing.T) {
	switch helperMode() {
	case "", "after-tests":
	case "no-main", "no-binaries":
		pgtest.New(t)
	case "fail-migration":
		for i := range 2 {
			t.Run(fmt.Sprint("test", i), func(t *testing.T) { pgtest.New(t) })
		}
	case "orphan":
		srv := pgtest.Server(t)
		fmt.Printf("DATADIR=%s\n", srv.DataDir)
		time.Sleep(time.Minute) // killed by the parent long before
	case "start":
		db := pgtest.New(t)
		fmt.Printf("DATADIR=%s\n", pgtest.Server(t).DataDir)
		pool := db.Open(t, "app")
		if err := pool.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown %s=%q", helperEnv, helperMode())
	}
}

func helperCommand(t *testing.T, mode string, env ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode}, env...)...)
	return cmd
}

func runHelper(t *testing.T, mode string, env ...string) (string, error) {
	out, err := helperCommand(t, mode, env...).CombinedOutput()
	return string(out), err
}

// afterTestsMarker is what the "after-tests" helper's AfterTests function
// prints.
const afterTestsMarker = "pgtest: after the tests"

// A function given to AfterTests runs once, after every test has ended,
// and the package's result stands.
func TestAfterTestsRunsOnceTheTestsHaveEnded(t *testing.T) {
	out, err := runHelper(t, "after-tests")
	if err != nil {
		t.Fatalf("the helper failed: %v\n%s", err, out)
	}
	ended := strings.Index(out, "--- PASS: TestHelperProcess")
	after := strings.Index(out, afterTestsMarker)
	if ended < 0 || after < ended || strings.Count(out, afterTestsMarker) != 1 {
		t.Errorf("want the marker once, after the test's result:\n%s", out)
	}
}

func TestNewFailsWithoutMain(t *testing.T) {
	out, err := runHelper(t, "no-main")
	if err == nil || !strings.Contains(out, "pgtest.Main") {
		t.Errorf("want a failure telling to use pgtest.Main, got err=%v, output:\n%s", err, out)
	}
}

func TestMissingBinariesFailTheTest(t *testing.T) {
	out, err := runHelper(t, "no-binaries", "TASKMESH_PG_BIN="+t.TempDir())
	if err == nil {
		t.Fatalf("tests passed without PostgreSQL binaries:\n%s", out)
	}
	for _, want := range []string{"--- FAIL: TestHelperProcess", "apt-get install -y postgresql", "TASKMESH_PG_BIN"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SKIP") {
		t.Errorf("a test was skipped:\n%s", out)
	}
}

func TestFailingMigrationFailsEveryTest(t *testing.T) {
	out, err := runHelper(t, "fail-migration")
	if err == nil {
		t.Fatalf("tests passed despite a failing template migration:\n%s", out)
	}
	for i := range 2 {
		if want := fmt.Sprintf("--- FAIL: TestHelperProcess/test%d", i); !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "app 0001_broken"); n < 2 {
		t.Errorf("the migration error is reported %d times, want once per test:\n%s", n, out)
	}
	if !strings.Contains(out, "no_such_column") {
		t.Errorf("output lacks the server's error:\n%s", out)
	}
}

// TestServerDiesWithTestBinary kills a test binary that started a server: the
// server must die with it, and the next test binary removes its data.
func TestServerDiesWithTestBinary(t *testing.T) {
	cmd := helperCommand(t, "orphan")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dataDir := ""
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "DATADIR="); ok {
			dataDir = d
			break
		}
	}
	if dataDir == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper did not report its data directory")
	}
	pidFile, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	// Line 1 is the postmaster's pid, line 7 the key and id of its System V
	// shared memory segment.
	lines := strings.Split(string(pidFile), "\n")
	postmaster, err := strconv.Atoi(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	var shmKey, shmID int
	if _, err := fmt.Sscan(lines[6], &shmKey, &shmID); err != nil {
		t.Fatalf("postmaster.pid line 7 %q: %v", lines[6], err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for processRunning(postmaster) {
		if time.Now().After(deadline) {
			syscall.Kill(postmaster, syscall.SIGKILL)
			t.Fatalf("postmaster %d outlived its test binary", postmaster)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Until the dead postmaster is reaped by whoever inherited it,
	// PostgreSQL will not start on its data directory, and so the next
	// binary cannot release its shared memory.
	for syscall.Kill(postmaster, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var shm unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(shmID, unix.IPC_STAT, &shm); err != nil {
		t.Fatalf("the killed server's shared memory segment %d is already gone: %v", shmID, err)
	}
	runDir := filepath.Dir(dataDir)
	if _, err := os.Stat(runDir); err != nil {
		t.Fatalf("the killed binary's run directory should still exist: %v", err)
	}

	// The next test binary cleans up after the dead one, and after itself.
	out, err := helperCommand(t, "start").CombinedOutput()
	if err != nil {
		t.Fatalf("next test binary failed: %v\n%s", err, out)
	}
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		os.RemoveAll(runDir)
		t.Errorf("stale run directory %s was not removed: %v", runDir, err)
	}
	if _, err := unix.SysvShmCtl(shmID, unix.IPC_STAT, &shm); err == nil {
		t.Errorf("the killed server's shared memory segment %d (key %d) was not released", shmID, shmKey)
	}
	_, next, _ := strings.Cut(string(out), "DATADIR=")
	next, _, _ = strings.Cut(next, "\n")
	if next == "" {
		t.Fatalf("next test binary did not report its data directory:\n%s", out)
	}
	if _, err := os.Stat(filepath.Dir(next)); !os.IsNotExist(err) {
		t.Errorf("run directory %s survived a normal exit: %v", filepath.Dir(next), err)
	}
}

// processRunning reports whether pid is a live process; a zombie (dead, not
// yet reaped by whoever inherited it) counts as dead.
func processRunning(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
