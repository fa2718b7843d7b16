package isolation

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Resources are the limits the agent enforces from a task's resources
// map; other entries (GPUs) are the scheduler's and the quota service's.
type Resources struct {
	MemoryBytes int64
	// CPUMillis is thousandths of a core ("500m", "1.5").
	CPUMillis int64
	Pids      int64
}

// Resource names the agent reads.
const (
	ResourceMemory = "memory"
	ResourceCPU    = "cpu"
	ResourcePids   = "pids"
)

// ParseResources reads memory (bytes: 64Mi, 1G, 5e8), cpu (cores: 500m,
// 2, 1.5) and pids (a count) from a task's resources.
func ParseResources(m map[string]string) (Resources, error) {
	var r Resources
	var err error
	if v, ok := m[ResourceMemory]; ok {
		if r.MemoryBytes, err = parseBytes(v); err != nil {
			return r, fmt.Errorf("resources.memory %q: %w", v, err)
		}
	}
	if v, ok := m[ResourceCPU]; ok {
		if r.CPUMillis, err = parseMillis(v); err != nil {
			return r, fmt.Errorf("resources.cpu %q: %w", v, err)
		}
	}
	if v, ok := m[ResourcePids]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return r, fmt.Errorf("resources.pids %q: want a positive count", v)
		}
		r.Pids = n
	}
	return r, nil
}

// suffixes are the Kubernetes quantity suffixes of byte amounts.
var suffixes = []struct {
	s string
	m float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.s) {
			s, mult = strings.TrimSuffix(s, x.s), x.m
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("want a positive byte quantity such as 64Mi or 2G")
	}
	// At least one page: a limit of a few bytes would kill anything.
	return max(int64(math.Ceil(f*mult)), 4096), nil
}

func parseMillis(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := 1000.0
	if strings.HasSuffix(s, "m") {
		s, mult = strings.TrimSuffix(s, "m"), 1
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f*mult > 1e12 {
		return 0, fmt.Errorf("want a positive CPU quantity such as 500m or 2")
	}
	// The kernel's smallest CFS quota is 1 ms per 100 ms: 10 millicores.
	return max(int64(math.Ceil(f*mult)), 10), nil
}
