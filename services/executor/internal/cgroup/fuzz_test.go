package cgroup

import "testing"

// FuzzParseMountinfo feeds arbitrary mountinfo and /proc/self/cgroup
// texts: nothing panics, and every mount found is a cgroup mount with a
// directory.
func FuzzParseMountinfo(f *testing.F) {
	f.Add(hybridMountinfo, hybridSelf)
	f.Add("26 25 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/a/b\n")
	f.Add("x - cgroup\n", "::\n1:a,b\n")
	f.Add(`1 2 3 / /a\040b\0 - cgroup c rw,memory`, "")
	f.Fuzz(func(t *testing.T, mountinfo, self string) {
		for _, m := range parseMountinfo([]byte(mountinfo)) {
			if m.dir == "" && !m.v2 && len(m.options) == 0 {
				t.Fatalf("empty mount from %q", mountinfo)
			}
		}
		_ = parseSelfCgroup([]byte(self))
	})
}
