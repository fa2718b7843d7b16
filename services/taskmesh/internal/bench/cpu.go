package bench

import (
	"fmt"
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

// cpuMark is a moment of a run with the CPU time used until then by this
// process and by the server.
type cpuMark struct {
	at           time.Time
	self, server time.Duration
}

func markNow(dataDir string) cpuMark {
	self, server := cpuClock(dataDir)
	return cpuMark{at: time.Now(), self: self, server: server}
}

// perItem is the CPU per item of n between two marks, this process's and
// the server's.
type perItem struct{ self, server time.Duration }

func cpuPer(from, to cpuMark, n int) perItem {
	d := time.Duration(max(n, 1))
	return perItem{self: (to.self - from.self) / d, server: (to.server - from.server) / d}
}

func (p perItem) total() time.Duration { return p.self + p.server }

// String is the total in µs with its parts: "312 (201+111)".
func (p perItem) String() string {
	return fmt.Sprintf("%d (%d+%d)", p.total().Microseconds(), p.self.Microseconds(), p.server.Microseconds())
}
