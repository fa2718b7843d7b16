// Package gcdefaults sets the Go garbage collector of a Taskmesh service
// process: collect a fifth as often as Go's default, and keep that from
// pushing the process past the memory its cgroup grants
// (docs/operations.md, "Memory and garbage collection").
//
// The services allocate briskly (protobuf, JSON, pgx buffers) and keep
// small live heaps, so at Go's default (GOGC=100) they collect several
// times a second under load, and the collector's marking and write
// barriers take a large share of their CPU. A heap allowed to grow to five
// times the live one collects a fifth as often. The cost is memory, which
// a soft memory limit bounds: below the cgroup's limit the collector runs
// as often as it must to stay under it, instead of the kernel killing the
// process.
package gcdefaults

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Percent is the GOGC a service process runs with when the environment
// does not set one.
const Percent = 400

// limitShare is the share of the cgroup's memory limit the Go runtime may
// use: the rest is for what the runtime does not count (the kernel's page
// cache charged to the cgroup, memory mapped by libraries).
const limitShare = 0.8

// Settings is what Apply sets; zero fields are left as the runtime has
// them (the environment's GOGC and GOMEMLIMIT, or Go's defaults).
type Settings struct {
	Percent     int   // GOGC
	MemoryLimit int64 // GOMEMLIMIT, bytes
}

// Choose returns the settings for a process whose environment is read by
// getenv and whose cgroup memory limit is limit (ok false: none). What the
// environment sets wins: the operator's GOGC and GOMEMLIMIT are kept.
func Choose(getenv func(string) string, limit int64, ok bool) Settings {
	var s Settings
	if getenv("GOGC") == "" {
		s.Percent = Percent
	}
	if getenv("GOMEMLIMIT") == "" && ok && limit > 0 {
		s.MemoryLimit = int64(float64(limit) * limitShare)
	}
	return s
}

// Apply sets s on the running process.
func Apply(s Settings) {
	if s.Percent != 0 {
		debug.SetGCPercent(s.Percent)
	}
	if s.MemoryLimit != 0 {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
}

// Set chooses and applies the settings for this process.
func Set() Settings {
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	cgroups, _ := os.ReadFile("/proc/self/cgroup")
	limit, ok := CgroupMemoryLimit(mountinfo, cgroups, "/")
	s := Choose(os.Getenv, limit, ok)
	Apply(s)
	return s
}

// CgroupMemoryLimit is the memory limit of the cgroup the process is in,
// read from its mountinfo and cgroup files (/proc/self/…) and the cgroup
// file systems under root: the v1 memory controller's
// memory.limit_in_bytes when that controller is mounted (a hybrid host
// keeps it there), else cgroup v2's memory.max. The cgroup's ancestors up
// to the mount limit it too; the smallest limit counts. ok is false when
// there is no limit ("max", v1's page-rounded maximum) or nothing to read.
func CgroupMemoryLimit(mountinfo, cgroups []byte, root string) (limit int64, ok bool) {
	var v1, v2 mount
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		m, fstype, superOpts, valid := parseMount(sc.Text())
		if !valid {
			continue
		}
		switch {
		case fstype == "cgroup2":
			v2 = m
		case fstype == "cgroup" && hasOption(superOpts, "memory"):
			v1 = m
		}
	}
	var v1Path, v2Path string
	var inV1, inV2 bool
	sc = bufio.NewScanner(bytes.NewReader(cgroups))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2Path, inV2 = parts[2], true
		case hasOption(parts[1], "memory"):
			v1Path, inV1 = parts[2], true
		}
	}
	switch {
	case v1.point != "" && inV1:
		return smallestLimit(root, v1, v1Path, "memory.limit_in_bytes")
	case v2.point != "" && inV2:
		return smallestLimit(root, v2, v2Path, "memory.max")
	}
	return 0, false
}

// mount is a cgroup file system's mount: the cgroup directory mounted
// (root, "/" unless in a cgroup namespace or a bind mount) and where.
type mount struct{ root, point string }

// parseMount reads a mountinfo line: ID parent major:minor root point
// options [optional fields] - fstype source super-options.
func parseMount(line string) (m mount, fstype, superOpts string, ok bool) {
	fields := strings.Fields(line)
	sep := -1
	for i, f := range fields {
		if f == "-" {
			sep = i
			break
		}
	}
	if sep < 5 || len(fields) < sep+4 {
		return mount{}, "", "", false
	}
	return mount{root: fields[3], point: fields[4]}, fields[sep+1], fields[sep+3], true
}

func hasOption(list, opt string) bool {
	for o := range strings.SplitSeq(list, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// smallestLimit reads file in the cgroup's directory and each ancestor's
// up to the mount, and returns the smallest limit set.
func smallestLimit(root string, m mount, cgroupPath, file string) (int64, bool) {
	rel, ok := strings.CutPrefix(cgroupPath, m.root)
	if !ok {
		// The cgroup is outside what is mounted here (another namespace's
		// view): nothing of it can be read.
		return 0, false
	}
	top := filepath.Join(root, m.point)
	dir := filepath.Join(top, rel)
	best, found := int64(math.MaxInt64), false
	for {
		if v, ok := readLimit(filepath.Join(dir, file)); ok && v < best {
			best, found = v, true
		}
		if dir == top || len(dir) < len(top) {
			break
		}
		dir = filepath.Dir(dir)
	}
	if !found {
		return 0, false
	}
	return best, true
}

// noLimitV1 is where cgroup v1 reports no limit: the largest page-aligned
// int64. Anything above an exbibyte is taken as no limit as well.
const noLimitV1 = 1 << 60

func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= noLimitV1 {
		return 0, false
	}
	return v, true
}
