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
