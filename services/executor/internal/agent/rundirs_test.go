package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

// spares lists the agent's spare run directories.
func (h *harness) spares() []string {
	h.t.Helper()
	names, err := dirNames(filepath.Join(h.cfg.DataDir, "spare-runs"))
	if err != nil {
		h.t.Fatal(err)
	}
	return names
}

// dirNames lists dir's entries, sorted.
func dirNames(dir string) ([]string, error) {
	names, _, err := dirState(dir)
	slices.Sort(names)
	return names, err
}

// runSettled runs task body to completion and waits until its run
// directory went back to the pool, then answers its stdout.
func (h *harness) runSettled(body string, args ...string) string {
	h.t.Helper()
	id := h.fake.Add(script(body, args...))[0]
	c := h.fake.WaitComplete(h.t, id, 15*time.Second)
	if c.GetExitCode() != 0 || c.GetError() != "" {
		h.t.Fatalf("task %s: exit %d %q, stderr %q", id, c.GetExitCode(), c.GetError(), c.GetStderr())
	}
	runDir := filepath.Join(h.cfg.DataDir, "runs", safeName(h.fake.Attempt(id)))
	leasetest.WaitFor(h.t, 10*time.Second, "the run directory settled", func() bool {
		_, err := os.Lstat(runDir)
		return os.IsNotExist(err)
	})
	return c.GetStdout()
}

// A task's run directory goes back to the pool emptied, and the next task
// gets it (the same inode) with an empty TMPDIR of mode 0700, whatever the
// task before did to it: files and directories in TMPDIR and beside it, a
// wider mode, TMPDIR replaced by a symbolic link (never followed: what it
// points to stays).
func TestRunDirectoriesAreReusedEmpty(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 1 }).start()
	target := shortDir(t)
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	inspect := `cd "$TMPDIR/.." && stat -c '%i' . && ls -A "$TMPDIR" && stat -c '%a' . "$TMPDIR" && ls -A . | grep -c left || true`
	first := h.runSettled(`stat -c '%i' "$TMPDIR/.."
echo x > "$TMPDIR/secret"; mkdir -p "$TMPDIR/a/b"; echo y > "$TMPDIR/a/b/c"
echo z > "$TMPDIR/../left-file"; mkdir "$TMPDIR/../left-dir"
chmod 777 "$TMPDIR" "$TMPDIR/.."`)
	if got := h.spares(); len(got) != 1 {
		t.Fatalf("spares after the first task: %v, want one", got)
	}
	second := h.runSettled(inspect+`
rm -rf "$TMPDIR" && ln -s "$1" "$TMPDIR"`, target)
	third := h.runSettled(inspect)
	inode := strings.TrimSpace(first)
	for i, out := range []string{second, third} {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		// inode; (ls of an empty TMPDIR prints nothing); modes; count of left-*
		if want := []string{inode, "700", "700", "0"}; !slices.Equal(lines, want) {
			t.Errorf("task %d saw %q, want %q: the same run directory, emptied, modes 0700", i+2, lines, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(target, "keep")); err != nil || string(b) != "x" {
		t.Errorf("the symbolic link's target lost its file (%q, %v): emptying followed the link", b, err)
	}
}

// newTestSpares is a pool of at most max spares beside a runs directory,
// and mk, which makes a run directory there as prepare does.
func newTestSpares(t *testing.T, max int) (s *spareRunDirs, runs string, mk func(name string) string) {
	t.Helper()
	s, err := newSpareRunDirs(filepath.Join(shortDir(t), "spare-runs"), max)
	if err != nil {
		t.Fatal(err)
	}
	runs = shortDir(t)
	return s, runs, func(name string) string {
		d := filepath.Join(runs, name)
		if err := os.MkdirAll(filepath.Join(d, runTmpDir), 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// A spare that holds anything but an empty tmp is never handed out: it is
// removed, and the attempt gets a directory of its own.
func TestSpareRunDirectoryWithAStrayFileIsNotHandedOut(t *testing.T) {
	s, runs, mk := newTestSpares(t, 4)
	if !s.recycle(mk("attempt-1")) {
		t.Fatal("an emptied run directory was not taken back")
	}
	spare := s.free[0]
	if err := os.WriteFile(filepath.Join(spare, "status.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(runs, "attempt-2")
	if s.take(next) {
		t.Fatal("a spare holding a stray status.json was handed out")
	}
	if _, err := os.Lstat(spare); !os.IsNotExist(err) {
		t.Errorf("the stray spare is still there (%v)", err)
	}
	if _, err := os.Lstat(next); !os.IsNotExist(err) {
		t.Errorf("take made %s (%v); prepare creates it", next, err)
	}
}

// take leaves a run directory that exists alone (an attempt re-spawned
// after a restart keeps what it holds) and keeps its spare; recycle gives
// up once the pool is full, and the caller removes the directory.
func TestSpareRunDirectoriesKeepExistingDirectoriesAndTheirBound(t *testing.T) {
	s, runs, mk := newTestSpares(t, 1)
	if !s.recycle(mk("a")) {
		t.Fatal("the first directory was not taken back")
	}
	if s.recycle(mk("b")) {
		t.Fatal("a full pool took another directory")
	}
	existing := mk("c")
	if err := os.WriteFile(filepath.Join(existing, "checkpoint"), []byte("restored"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.take(existing) {
		t.Fatal("take replaced a run directory that exists")
	}
	if b, err := os.ReadFile(filepath.Join(existing, "checkpoint")); err != nil || string(b) != "restored" {
		t.Errorf("the existing run directory changed: %q, %v", b, err)
	}
	if len(s.free) != 1 {
		t.Errorf("spares = %v, want the one kept", s.free)
	}
	if !s.take(filepath.Join(runs, "d")) {
		t.Error("the kept spare was not handed out")
	}
}

// A restarted agent starts with an empty pool: what an earlier run left in
// spare-runs is removed.
func TestAgentStartsWithNoSpareRunDirectories(t *testing.T) {
	h := newHarness(t, nil)
	left := filepath.Join(h.cfg.DataDir, "spare-runs", "7", "tmp")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	h.start()
	if got := h.spares(); len(got) != 0 {
		t.Errorf("spares after a start: %v, want none", got)
	}
}
