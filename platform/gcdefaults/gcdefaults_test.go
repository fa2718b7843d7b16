package gcdefaults

import (
	"os"
	"path/filepath"
	"testing"
)

// hybridMountinfo is a host like this project's CI machines: the memory
// controller on cgroup v1, a v2 tree without it.
const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridCgroups = `4:memory:/pods/tm
1:cpu:/
0::/
`

// v2Mountinfo is a container on a cgroup v2 host with a cgroup namespace:
// its own cgroup is the mount's root.
const v2Mountinfo = `1020 1000 0:27 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate
`

// write creates root/rel with content.
func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	const gib = 1 << 30
	cases := []struct {
		name              string
		mountinfo, groups string
		files             map[string]string
		want              int64
		ok                bool
	}{
		{
			name: "v1 memory controller on a hybrid host", mountinfo: hybridMountinfo, groups: hybridCgroups,
			files: map[string]string{
				"sys/fs/cgroup/memory/pods/tm/memory.limit_in_bytes": "2147483648\n",
				"sys/fs/cgroup/memory/pods/memory.limit_in_bytes":    "9223372036854771712\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":         "9223372036854771712\n",
				// The v2 tree has no memory controller: not read.
				"sys/fs/cgroup/unified/memory.max": "1073741824\n",
			},
			want: 2 * gib, ok: true,
		},
		{
			name: "an ancestor's smaller limit counts", mountinfo: hybridMountinfo, groups: hybridCgroups,
			files: map[string]string{
				"sys/fs/cgroup/memory/pods/tm/memory.limit_in_bytes": "2147483648\n",
				"sys/fs/cgroup/memory/pods/memory.limit_in_bytes":    "1073741824\n",
			},
			want: gib, ok: true,
		},
		{
			name: "v1 without a limit", mountinfo: hybridMountinfo, groups: hybridCgroups,
			files: map[string]string{
				"sys/fs/cgroup/memory/pods/tm/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":         "9223372036854771712\n",
			},
		},
		{
			name: "v2 in a cgroup namespace", mountinfo: v2Mountinfo, groups: "0::/\n",
			files: map[string]string{"sys/fs/cgroup/memory.max": "1073741824\n"},
			want:  gib, ok: true,
		},
		{
			name: "v2 max", mountinfo: v2Mountinfo, groups: "0::/\n",
			files: map[string]string{"sys/fs/cgroup/memory.max": "max\n"},
		},
		{
			name: "v2 without a namespace: the cgroup below the mount", mountinfo: v2Mountinfo, groups: "0::/system.slice/tm.service\n",
			files: map[string]string{
				"sys/fs/cgroup/system.slice/tm.service/memory.max": "max\n",
				"sys/fs/cgroup/system.slice/memory.max":            "536870912\n",
			},
			want: gib / 2, ok: true,
		},
		{
			name: "a cgroup outside the mounted root", mountinfo: `1 0 0:27 /other /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`, groups: "0::/mine\n",
			files: map[string]string{"sys/fs/cgroup/memory.max": "1073741824\n"},
		},
		{name: "no cgroup file systems", mountinfo: "22 1 8:1 / / rw - ext4 /dev/vda rw\n", groups: "0::/\n"},
		{name: "garbage", mountinfo: "not a mount line\n- - -\n", groups: "nonsense\n",
			files: map[string]string{"sys/fs/cgroup/memory.max": "1073741824\n"}},
		{
			name: "unreadable limit", mountinfo: v2Mountinfo, groups: "0::/\n",
			files: map[string]string{"sys/fs/cgroup/memory.max": "lots\n"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, content := range c.files {
				write(t, root, rel, content)
			}
			got, ok := CgroupMemoryLimit([]byte(c.mountinfo), []byte(c.groups), root)
			if got != c.want || ok != c.ok {
				t.Fatalf("CgroupMemoryLimit = %d, %v; want %d, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestChooseKeepsTheEnvironmentsSettings(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	if got := Choose(env(nil), 0, false); got != (Settings{Percent: Percent}) {
		t.Errorf("no environment, no limit: %+v", got)
	}
	if got := Choose(env(nil), 1000, true); got != (Settings{Percent: Percent, MemoryLimit: 800}) {
		t.Errorf("no environment, a limit of 1000: %+v, want 80%% of it", got)
	}
	if got := Choose(env(map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}), 1000, true); got != (Settings{}) {
		t.Errorf("GOGC and GOMEMLIMIT set: %+v, want nothing changed", got)
	}
	if got := Choose(env(map[string]string{"GOGC": "off"}), 1000, true); got != (Settings{MemoryLimit: 800}) {
		t.Errorf("GOGC=off: %+v, want only the limit", got)
	}
}
