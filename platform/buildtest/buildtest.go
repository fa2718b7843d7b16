// Package buildtest builds the Go binaries that tests run as processes
// (the deployment of the chaos suite, the container image's binaries, the
// stage worker). Every one is built with the same compile flags, those of
// the image: static (CGO_ENABLED=0) and with trimmed paths. Each other set
// of flags would compile the whole module graph once more on a machine
// whose build cache is cold, as `make test` on a fresh clone has it: about
// three minutes of both cores for the taskmesh binary's graph.
package buildtest

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
)

// Binary builds the main package pkg (an import path, or a directory
// relative to the test's) into out, linked with ldflags ("" for none),
// and fails t if it does not build.
func Binary(t testing.TB, pkg, out, ldflags string) {
	t.Helper()
	args := []string{"build", "-trimpath", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	build := exec.Command("go", append(args, pkg)...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
	if outb, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, outb)
	}
}
