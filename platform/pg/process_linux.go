package pg

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// setParentDeathSignal makes the kernel SIGKILL the server when this process
// dies, however it dies, so that a test binary killed by a timeout leaves no
// postgres behind. (The signal is tied to the OS thread that started the
// child; Go only retires threads of goroutines that exit while locked to
// them, which Start's callers do not do.) Backends then exit by themselves:
// PostgreSQL watches for postmaster death.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// freezeServer stops (SIGSTOP) the postmaster so that it forks no more
// processes, and returns its children: its backends and auxiliary
// processes, including any already exiting (the stopped postmaster does not
// reap them, so they stay its children).
func freezeServer(postmaster int) []int {
	if syscall.Kill(postmaster, syscall.SIGSTOP) != nil {
		return nil
	}
	// Delivery is asynchronous; a fork may be under way until it is stopped.
	for deadline := time.Now().Add(time.Second); procState(postmaster) != 'T' && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var children []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := procPPID(pid); ok && ppid == postmaster {
			children = append(children, pid)
		}
	}
	return children
}

// killClusterProcesses SIGKILLs children (found by freezeServer) and every
// other live postgres process whose working directory is dataDir (every
// PostgreSQL server process chdirs there, and they keep the command name
// "postgres" whatever title they show in ps), and waits until all of them
// have exited, so that a new postmaster does not find the old shared memory
// still attached. It gives up after 5 s.
func killClusterProcesses(dataDir string, children []int) {
	// /proc/<pid>/cwd holds the resolved path, so compare with dataDir
	// resolved too: a data directory under a symlinked temporary directory
	// would otherwise match nothing.
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		want = dataDir
	}
	killed := map[int]bool{}
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		killed[pid] = true
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, pid := range clusterProcesses(want) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		// A zombie has exited and let go of the shared memory; only its
		// reaping is left, which is its parent's business.
		for pid := range killed {
			if !processExists(pid) || isZombie(pid) {
				delete(killed, pid)
			}
		}
		if len(killed) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clusterProcesses lists live (not zombie) postgres processes working in dir.
// Processes of other users are only visible when running as root, which is
// also the only case where the server runs as another user.
func clusterProcesses(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		// Never this process, even if its working directory is dataDir (a
		// test that changed into it).
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || cwd != dir {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if !isZombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isZombie reports whether pid has exited but not been reaped.
func isZombie(pid int) bool { return procState(pid) == 'Z' }

// procState returns the state letter of pid from /proc/<pid>/stat (R, S, T,
// Z, …), or 0 if it cannot be read.
func procState(pid int) byte {
	fields := procStatFields(pid)
	if len(fields) < 1 || len(fields[0]) != 1 {
		return 0
	}
	return fields[0][0]
}

// procPPID returns the parent of pid.
func procPPID(pid int) (int, bool) {
	fields := procStatFields(pid)
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}

// procStatFields returns the fields of /proc/<pid>/stat after the
// parenthesised command name (which may itself contain spaces and
// parentheses): state, ppid, ….
func procStatFields(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}
