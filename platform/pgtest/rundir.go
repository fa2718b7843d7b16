package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// makeRunDir creates the directory holding this test binary's server (data
// directory and log): <base>/<pid>-<random>, where base is
// /dev/shm/taskmesh-pgtest-<uid> when /dev/shm exists (memory is faster than
// any disk, and the data is throwaway) and under os.TempDir() otherwise.
//
// Directories of test binaries that died without cleaning up are removed
// first; the pid in the name tells which are dead.
func makeRunDir() (string, error) {
	root := os.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		root = "/dev/shm"
	}
	base := filepath.Join(root, "taskmesh-pgtest-"+strconv.Itoa(os.Getuid()))
	// 0755: when running as root the server runs as the postgres user and
	// must be able to reach the data directory below.
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", base, err)
	}
	removeStaleRunDirs(base)
	dir, err := os.MkdirTemp(base, strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// removeStaleRunDirs removes run directories whose test binary and server are
// both gone. Errors are ignored: a leftover directory only wastes space.
//
// A server killed with its test binary leaves shared memory behind besides
// its files (a System V segment and, on Linux, a file in /dev/shm), which
// only PostgreSQL knows how to find: it releases them when it starts on the
// same data directory. So a stale directory with a postmaster.pid gets its
// server started and stopped once before it is removed. Another test binary
// may be cleaning up at the same time, hence the rename first: only one of
// them gets the directory, and its new name carries the winner's pid.
func removeStaleRunDirs(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		owner, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(owner)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		// A killed postmaster blocks a restart (and so the release of its
		// shared memory) until it has been reaped, even as a zombie.
		if pm := postmasterPID(dir); pm > 0 && exists(pm) {
			continue
		}
		claimed := filepath.Join(base, fmt.Sprintf("%d-stale-%s", os.Getpid(), e.Name()))
		if err := os.Rename(dir, claimed); err != nil {
			continue
		}
		if postmasterPID(claimed) > 0 {
			releaseSharedMemory(claimed)
		}
		os.RemoveAll(claimed)
	}
}

// releaseSharedMemory starts and stops the server of a dead test binary's run
// directory; see removeStaleRunDirs. It must use the old port: PostgreSQL
// derives the System V key it looks for from the port.
func releaseSharedMemory(runDir string) {
	lines := strings.Split(readPIDFile(runDir), "\n")
	if len(lines) < 4 {
		return
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil || port <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	srv := &pg.LocalServer{DataDir: filepath.Join(runDir, "data"), Port: port}
	if srv.Start(ctx) == nil {
		srv.Stop()
	}
}

func postmasterPID(runDir string) int {
	first, _, _ := strings.Cut(readPIDFile(runDir), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// readPIDFile returns the server's postmaster.pid, or "" when it has none
// (never started, or stopped cleanly).
func readPIDFile(runDir string) string {
	b, err := os.ReadFile(filepath.Join(runDir, "data", "postmaster.pid"))
	if err != nil {
		return ""
	}
	return string(b)
}
