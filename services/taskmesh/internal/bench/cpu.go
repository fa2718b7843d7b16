package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuClock is the CPU time used so far by this process and by the
// PostgreSQL processes running on dataDir (utime + stime).
func cpuClock(dataDir string) (self, server time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return self, 0
	}
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return self, 0
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err != nil || cwd != dir {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 13 {
			continue
		}
		// utime and stime are fields 14 and 15 of stat, in clock ticks
		// (USER_HZ, 100 on Linux).
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		server += time.Duration(u+s) * 10 * time.Millisecond
	}
	return self, server
}
