// Package buildtest builds the Go binaries that tests run as processes
// (the deployment of the chaos suite, the container image's binaries, the
// stage worker). Every one is built with the same compile flags, those of
// the image: static (CGO_ENABLED=0) and with trimmed paths. Each other set
// of flags would compile the whole module graph once more on a machine
// whose build cache is cold, as `make test` on a fresh clone has it: about
// three minutes of both cores for the taskmesh binary's graph.
//
// Sharing flags is not enough on its own: the go command shares a compile
// only once it is in the cache, not while it runs, so two test packages
// building the taskmesh binary at once on a cold cache would each compile
// the whole graph. Binary therefore holds a lock on a file in the build
// cache for the length of its build: the second build waits for the
// first and then only links (docs/decisions/0131-test-builds-take-turns.md).
package buildtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// lockName is the file, in the build cache's directory, that builds lock.
const lockName = "taskmesh-buildtest.lock"

// Binary builds the main package pkg (an import path, or a directory
// relative to the test's) into out, linked with ldflags ("" for none),
// and fails t if it does not build. It waits while another test, in this
// process or another, builds through Binary with the same build cache.
func Binary(t testing.TB, pkg, out, ldflags string) {
	t.Helper()
	args := []string{"build", "-trimpath", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
	unlock, err := lockBuildCache(env)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	build := exec.Command("go", append(args, pkg)...)
	build.Env = env
	if outb, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, outb)
	}
}

// lockBuildCache takes an exclusive flock on lockName in the build cache
// that env selects and returns what releases it. A flock belongs to an
// open file, so two Binary calls in one process exclude each other as two
// processes do, and the kernel drops it when its process ends however it
// ends: a test killed in the middle of a build leaves nothing held. With
// no cache (GOCACHE=off) there is nothing to share, and no lock.
func lockBuildCache(env []string) (unlock func(), err error) {
	query := exec.Command("go", "env", "GOCACHE")
	query.Env = env
	out, err := query.Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOCACHE: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || dir == "off" {
		return func() {}, nil
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("build cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("build lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}
