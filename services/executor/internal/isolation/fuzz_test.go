package isolation

import "testing"

// FuzzParseResources feeds arbitrary quantities: nothing panics, and what
// is accepted is positive (a limit of zero would be no limit at all).
func FuzzParseResources(f *testing.F) {
	for _, s := range [][3]string{{"64Mi", "500m", "100"}, {"1G", "2", ""}, {"5e8", "1.5", "1"}, {"-1", "0", "0"},
		{"1Ei", "1e12", "9223372036854775807"}, {"NaN", "Inf", "x"}, {"", "", ""}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, mem, cpu, pids string) {
		m := map[string]string{}
		for k, v := range map[string]string{ResourceMemory: mem, ResourceCPU: cpu, ResourcePids: pids} {
			if v != "" {
				m[k] = v
			}
		}
		r, err := ParseResources(m)
		if err != nil {
			return
		}
		if (mem != "" && r.MemoryBytes < 4096) || (cpu != "" && r.CPUMillis < 10) || (pids != "" && r.Pids <= 0) ||
			r.MemoryBytes < 0 || r.CPUMillis < 0 || r.Pids < 0 {
			t.Fatalf("%q %q %q parsed as %+v", mem, cpu, pids, r)
		}
	})
}
