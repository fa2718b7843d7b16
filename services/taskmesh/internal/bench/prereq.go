package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// Requirement is a program a benchmark runs and the Debian package that
// installs it.
type Requirement struct {
	Program, Package string
}

// postgres stands for the PostgreSQL server binaries (initdb, postgres),
// which pg.FindBinDir looks for where Debian puts them, off PATH.
const postgres = "the PostgreSQL server (initdb, postgres)"

// requirements are the programs each benchmark starts. GoBenchmarks names
// the in-process benchmarks `make bench` runs with go test afterwards.
var requirements = map[string][]Requirement{
	"events":    {{postgres, "postgresql"}, {"pgbench", "postgresql"}},
	"tasks":     {{postgres, "postgresql"}},
	"spawn":     {{postgres, "postgresql"}},
	"gateway":   {{postgres, "postgresql"}},
	"admission": {{postgres, "postgresql"}},
	"pipeline":  {{postgres, "postgresql"}},
	"dag":       {{postgres, "postgresql"}},
	"scale":     {{postgres, "postgresql"}},
	"consumers": {{postgres, "postgresql"}},
	"slurm": {{postgres, "postgresql"}, {"munged", "munge"}, {"slurmctld", "slurmctld"}, {"slurmd", "slurmd"},
		{"slurmrestd", "slurmrestd"}, {"scontrol", "slurm-client"}, {"sinfo", "slurm-client"}, {"sbatch", "slurm-client"},
		{"slurmdbd", "slurmdbd"}, {"mariadbd", "mariadb-server"}, {"mariadb-install-db", "mariadb-server"}},
	GoBenchmarks: {{"redis-server", "redis-server"}},
}

// GoBenchmarks is the name under which Missing knows the go test
// benchmarks of `make bench` (the rate limiter's need redis-server).
const GoBenchmarks = "go-bench"

// Missing returns what the named benchmarks need and this machine lacks,
// each program once, in the order the benchmarks name them. found reports
// whether a program is installed.
func Missing(benchmarks []string, found func(program string) bool) []Requirement {
	var out []Requirement
	seen := map[string]bool{}
	for _, b := range benchmarks {
		for _, r := range requirements[b] {
			if seen[r.Program] {
				continue
			}
			seen[r.Program] = true
			if !found(r.Program) {
				out = append(out, r)
			}
		}
	}
	return out
}

// HasRequirements reports whether the benchmark's programs are listed.
func HasRequirements(benchmark string) bool { return len(requirements[benchmark]) > 0 }

// ErrMissing is returned (wrapped) by CheckPrerequisites when a program
// is not installed.
var ErrMissing = errors.New("benchmark prerequisites missing")

// CheckPrerequisites fails, before anything starts, when the named
// benchmarks need programs this machine lacks; the error names each one
// and the apt-get command that installs them all.
func CheckPrerequisites(benchmarks []string, found func(program string) bool) error {
	missing := Missing(benchmarks, found)
	if len(missing) == 0 {
		return nil
	}
	var progs, pkgs []string
	for _, r := range missing {
		progs = append(progs, r.Program)
		if !slices.Contains(pkgs, r.Package) {
			pkgs = append(pkgs, r.Package)
		}
	}
	return fmt.Errorf("%w: %s not found; install with\n  apt-get update && apt-get install -y %s",
		ErrMissing, strings.Join(progs, ", "), strings.Join(pkgs, " "))
}

// Installed reports whether program is on this machine: on PATH or in the
// system directories root's PATH has (a login shell of another user may
// lack /usr/sbin, where munged and slurmctld live); the PostgreSQL server
// and pgbench also where pg.FindBinDir finds the server.
func Installed(program string) bool {
	if program == postgres || program == "pgbench" {
		if dir, err := pg.FindBinDir(); err == nil {
			if program == postgres || isProgram(filepath.Join(dir, program)) {
				return true
			}
		} else if program == postgres {
			return false
		}
	}
	if _, err := exec.LookPath(program); err == nil {
		return true
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if isProgram(filepath.Join(dir, program)) {
			return true
		}
	}
	return false
}

func isProgram(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
