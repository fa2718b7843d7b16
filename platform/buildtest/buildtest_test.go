package buildtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// helperEnv makes the test binary, re-executed, hold the build lock until
// its standard input closes: another process building, as a second test
// package would be.
const helperEnv = "BUILDTEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		holdLock()
		return
	}
	os.Exit(m.Run())
}

func holdLock() {
	unlock, err := lockBuildCache(os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until stdin closes
	unlock()
}

func TestBinaryBuildsAProgramThatRuns(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hello")
	Binary(t, "./testdata/hello", bin, "-s -w")
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	if string(out) != "hello\n" {
		t.Fatalf("hello printed %q, want %q", out, "hello\n")
	}
}

// While another process holds the build lock, Binary writes nothing; it
// builds once the lock is let go.
func TestBinaryWaitsWhileAnotherProcessBuilds(t *testing.T) {
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), helperEnv+"=1")
	release, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release.Close(); _ = holder.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("lock holder said %q, %v", line, err)
	}

	// Binary runs here; this goroutine looks while the lock is held, then
	// lets it go. A build of this package from a warm cache takes well
	// under the wait: a Binary that did not wait would have written bin.
	bin := filepath.Join(t.TempDir(), "hello")
	type look struct {
		statErr  error
		released time.Time
	}
	looked := make(chan look, 1)
	go func() {
		time.Sleep(2 * time.Second)
		_, err := os.Stat(bin)
		at := time.Now()
		release.Close()
		looked <- look{err, at}
	}()
	Binary(t, "./testdata/hello", bin, "")
	built := time.Now()
	l := <-looked
	if !os.IsNotExist(l.statErr) {
		t.Fatalf("%s was built while another process held the build lock (stat: %v)", bin, l.statErr)
	}
	if built.Before(l.released) {
		t.Fatalf("built at %v, before the lock was let go at %v", built, l.released)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("after the lock was let go: %v", err)
	}
}
