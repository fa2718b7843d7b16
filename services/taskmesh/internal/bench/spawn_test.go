package bench

import (
	"strings"
	"testing"
)

func TestSpawnBareRunsEveryProcess(t *testing.T) {
	rate, err := spawnBare(t.Context(), "/bin/true", 20, 4)
	if err != nil || rate <= 0 {
		t.Fatalf("rate %v, err %v", rate, err)
	}
}

// A process that cannot start or fails fails the baseline, naming it,
// instead of counting as spawned.
func TestSpawnBareFailsWithItsProcess(t *testing.T) {
	for _, path := range []string{"/nonexistent/true", "/bin/false"} {
		if _, err := spawnBare(t.Context(), path, 20, 4); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err %v, want one naming it", path, err)
		}
	}
}

// Below the target the machine's own rate is named; at or above it
// nothing is added.
func TestSpawnCeilingNamesASlowMachine(t *testing.T) {
	var out strings.Builder
	spawnCeiling(&out, 266)
	if got := out.String(); !strings.Contains(got, "266 bare /bin/true processes/s") || !strings.Contains(got, "fewer than the 300 tasks/s") {
		t.Errorf("slow machine: %q", got)
	}
	out.Reset()
	spawnCeiling(&out, 2900)
	if out.Len() != 0 {
		t.Errorf("fast machine: %q, want nothing", out.String())
	}
}
