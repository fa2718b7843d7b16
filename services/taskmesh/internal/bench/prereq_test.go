package bench

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// A machine without redis-server, pgbench and Slurm: the check names each
// missing program once and one apt-get command for all their packages.
func TestCheckPrerequisitesNamesWhatIsMissing(t *testing.T) {
	has := func(installed ...string) func(string) bool {
		return func(p string) bool { return slices.Contains(installed, p) }
	}
	err := CheckPrerequisites([]string{"events", "tasks", "slurm", GoBenchmarks}, has(postgres, "munged", "slurmd"))
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("error = %v, want ErrMissing", err)
	}
	msg := err.Error()
	for _, want := range []string{"pgbench, slurmctld, slurmrestd, scontrol, sinfo, sbatch, slurmdbd, mariadbd, mariadb-install-db, redis-server not found",
		"apt-get update && apt-get install -y postgresql slurmctld slurmrestd slurm-client slurmdbd mariadb-server redis-server"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if got := Missing([]string{"tasks", "spawn", "dag"}, has()); len(got) != 1 || got[0] != (Requirement{postgres, "postgresql"}) {
		t.Errorf("PostgreSQL needed by three benchmarks: missing = %v, want it once", got)
	}
	if err := CheckPrerequisites([]string{"tasks", GoBenchmarks}, has(postgres, "redis-server")); err != nil {
		t.Errorf("everything installed: %v", err)
	}
}

func TestInstalledTellsAProgramFromNone(t *testing.T) {
	if !Installed("sh") || Installed("no-such-program-anywhere") {
		t.Error("Installed does not tell sh from a program that does not exist")
	}
}
