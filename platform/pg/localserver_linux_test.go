package pg_test

import (
	"bytes"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// TestLocalServerKillLeavesNoProcesses checks that Kill takes the backends
// down with the postmaster (they live in sessions of their own, out of reach
// of the process group), so nothing of the old server survives it.
func TestLocalServerKillLeavesNoProcesses(t *testing.T) {
	t.Parallel()
	s := &pg.LocalServer{DataDir: filepath.Join(serverDir(t), "data")}
	startServer(t, s)
	pidFile, err := os.ReadFile(filepath.Join(s.DataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	var postmaster int
	fmt.Sscan(string(pidFile), &postmaster)
	pids = append(pids, postmaster)
	for range 2 {
		var pid int
		if err := connect(t, s.URL("postgres")).QueryRow(testCtx(t), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("server process %d still running after Kill", pid)
		}
	}
	// Only a new start on the data directory releases the killed server's
	// shared memory; startServer's cleanup then stops it.
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// A server that exited without being reaped yet (its parent was killed
// first) holds back a start only until it is reaped: Start waits for that
// instead of failing.
func TestLocalServerStartWaitsForAnExitedServerToBeReaped(t *testing.T) {
	t.Parallel()
	s := &pg.LocalServer{DataDir: filepath.Join(serverDir(t), "data")}
	startServer(t, s)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	// A child that exits and is not waited for is a zombie: it stands for
	// the killed server's postmaster in postmaster.pid.
	child := osexec.Command("true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); running(child.Process.Pid); {
		if time.Now().After(deadline) {
			t.Fatal("the child never exited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pidFile := filepath.Join(s.DataDir, "postmaster.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(child.Process.Pid)+"\n"+s.DataDir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The server's user (postgres, when the tests run as root) must be
	// able to replace it, as it would its own.
	fi, err := os.Stat(s.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Chown(pidFile, int(st.Uid), int(st.Gid)) != nil {
		t.Fatal("chown postmaster.pid")
	}
	const reapAfter = 500 * time.Millisecond
	go func() { time.Sleep(reapAfter); _ = child.Wait() }()
	began := time.Now()
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatalf("start beside a zombie that is reaped after %s: %v", reapAfter, err)
	}
	if took := time.Since(began); took < reapAfter {
		t.Fatalf("started after %s, before the zombie was reaped", took)
	}
}

// running reports whether pid is a live process, not a zombie waiting to be
// reaped.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
