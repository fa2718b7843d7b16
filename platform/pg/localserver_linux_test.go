package pg_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
