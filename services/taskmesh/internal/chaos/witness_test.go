package chaos

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the witness: the stubborn tasks run
// `<taskmesh> chaos witness --dir D --hold H`, and the tests below run
// this binary with the same arguments, as separate processes, since what
// the witness sees is other processes holding a lock.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "chaos" && os.Args[2] == "witness" {
		fs := flag.NewFlagSet("witness", flag.ExitOnError)
		dir := fs.String("dir", "", "")
		hold := fs.Duration("hold", 0, "")
		_ = fs.Parse(os.Args[3:])
		if err := Witness(*dir, *hold, os.Getenv("TASKMESH_TASK_ID"), os.Getenv("TASKMESH_ATTEMPT_ID")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// witnessRun is one witness process, run as a stubborn task's attempt.
type witnessRun struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

func startWitness(t *testing.T, dir, task, attempt string, hold time.Duration) *witnessRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := witnessCommand(self, dir, hold)
	w := &witnessRun{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan error, 1)}
	// Under -race the runtime sleeps a second before every exit unless
	// told otherwise, which would be most of these tests' time.
	w.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "TASKMESH_TASK_ID="+task, "TASKMESH_ATTEMPT_ID="+attempt)
	w.cmd.Stderr = &w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
	})
	return w
}

// wait is the run's exit, within limit.
func (w *witnessRun) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup's
		return err
	case <-time.After(limit):
		t.Fatalf("the witness (%v) still runs after %s", w.cmd.Args, limit)
		return nil
	}
}

// waitHeld waits until a run of task holds its lock: a holder writes its
// attempt into the lock file once it has it.
func waitHeld(t *testing.T, dir, task, attempt string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(filepath.Join(dir, task+witnessLockSuffix)); strings.Contains(string(b), "attempt "+attempt+" ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("attempt %s of %s never held its lock", attempt, task)
}

func overlapFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+witnessOverlapSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// Two runs of one task alive at once: the second finds the lock taken,
// records the overlap naming the first, waits for the first to end and
// then runs as usual. Both ignore the SIGTERM each gets meanwhile. A run
// of another task at the same time is no overlap.
func TestWitnessCatchesTwoLiveRunsOfOneTask(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "task-1.a2"+witnessOverlapSuffix)
	first := startWitness(t, dir, "task-1", "a1", 1500*time.Millisecond)
	waitHeld(t, dir, "task-1", "a1")
	other := startWitness(t, dir, "task-2", "b1", 100*time.Millisecond)
	second := startWitness(t, dir, "task-1", "a2", 100*time.Millisecond)
	// The record is written as soon as the lock is refused, before the
	// wait: a run killed while it waits has left it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(record); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no overlap record from the second run of task-1 (stderr %q)", second.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, w := range []*witnessRun{first, second} {
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.wait(t, 5*time.Second); err != nil {
		t.Fatalf("task-2's run: %v (stderr %q)", err, other.stderr.String())
	}
	if err := first.wait(t, 5*time.Second); err != nil {
		t.Fatalf("the first run, sent SIGTERM while it held the lock: %v, want it to ignore it and end with 0 (stderr %q)", err, first.stderr.String())
	}
	select {
	case err := <-second.done:
		second.done <- err
		t.Fatalf("the second run ended (%v) while the first still held the lock", err)
	default:
	}
	if err := second.wait(t, 5*time.Second); err != nil {
		t.Fatalf("the second run, sent SIGTERM while it waited: %v, want it to wait, hold and end with 0 (stderr %q)", err, second.stderr.String())
	}
	if got := overlapFiles(t, dir); len(got) != 1 || got[0] != "task-1.a2"+witnessOverlapSuffix {
		t.Fatalf("overlap records %v, want [task-1.a2%s]", got, witnessOverlapSuffix)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if rec := string(b); !strings.Contains(rec, "attempt a2 pid") || !strings.Contains(rec, "held by: attempt a1 pid") ||
		!strings.Contains(rec, "the holder ended") {
		t.Errorf("the overlap record does not name both runs and how long they overlapped: %q", rec)
	}
	inv, err := checkOverlaps(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Count != 1 || len(inv.First) != 1 || !strings.HasPrefix(inv.First[0], "task-1: ") || !strings.Contains(inv.First[0], "; the holder ended") {
		t.Fatalf("invariant %+v, want task-1 once, with how long it overlapped", inv)
	}
}

// Runs of one task one after the other are no overlap.
func TestWitnessRunsInTurnAreClean(t *testing.T) {
	dir := t.TempDir()
	for _, attempt := range []string{"a1", "a2", "a3"} {
		w := startWitness(t, dir, "task-1", attempt, 50*time.Millisecond)
		if err := w.wait(t, 5*time.Second); err != nil {
			t.Fatalf("attempt %s: %v (stderr %q)", attempt, err, w.stderr.String())
		}
	}
	if got := overlapFiles(t, dir); len(got) != 0 {
		t.Fatalf("overlap records %v after runs in turn, want none", got)
	}
}

// A run killed with SIGKILL while it holds the lock leaves nothing held:
// the kernel drops the lock with the process, so the next run is clean.
func TestWitnessKilledHolderReleasesTheLock(t *testing.T) {
	dir := t.TempDir()
	first := startWitness(t, dir, "task-1", "a1", time.Minute)
	waitHeld(t, dir, "task-1", "a1")
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.wait(t, 5*time.Second)
	next := startWitness(t, dir, "task-1", "a2", 50*time.Millisecond)
	if err := next.wait(t, 5*time.Second); err != nil {
		t.Fatalf("the run after a killed holder: %v (stderr %q), want a clean run", err, next.stderr.String())
	}
	if got := overlapFiles(t, dir); len(got) != 0 {
		t.Fatalf("overlap records %v after the holder was killed, want none", got)
	}
}

// A witness started outside a task refuses to run rather than lock a file
// no run of any task would share.
func TestWitnessNeedsItsTask(t *testing.T) {
	dir := t.TempDir()
	for _, task := range []string{"", "..", "a/b", "a.b"} {
		w := startWitness(t, dir, task, "a1", 0)
		if err := w.wait(t, 5*time.Second); err == nil || !strings.Contains(w.stderr.String(), "TASKMESH_TASK_ID") {
			t.Errorf("task id %q: %v (stderr %q), want a refusal naming TASKMESH_TASK_ID", task, err, w.stderr.String())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused runs left %d files", len(entries))
	}
}

// The invariant counts the overlap records, oldest first, and says how
// many tasks were witnessed; stubborn tasks none of which ran the witness
// are an offence, not a pass.
func TestProcessOverlapsFromTheWitnessRecords(t *testing.T) {
	write := func(dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for _, task := range []string{"t1", "t2", "t3"} {
		write(dir, task+witnessLockSuffix, "attempt x pid 1 in /w since 2026-01-01T00:00:00.000000Z\n")
	}
	write(dir, "t2.a9"+witnessOverlapSuffix, "2026-01-01T00:00:09.000000Z attempt a9 pid 9 in /agent-2/work started while the lock was held by: attempt a8\n")
	write(dir, "t1.a2"+witnessOverlapSuffix, "2026-01-01T00:00:02.000000Z attempt a2 pid 2 in /agent-3/work started while the lock was held by: attempt a1\n"+
		"2026-01-01T00:00:03.500000Z the holder ended 1.5s later\n")
	inv, err := checkOverlaps(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Name != "process overlaps" || inv.Count != 2 || inv.Checked != "3 of 4 stubborn tasks witnessed" {
		t.Fatalf("invariant %+v, want 2 process overlaps of 3 of 4 tasks witnessed", inv)
	}
	if !strings.HasPrefix(inv.First[0], "t1: 2026-01-01T00:00:02") || !strings.HasSuffix(inv.First[0], "attempt a1; the holder ended 1.5s later") ||
		!strings.HasPrefix(inv.First[1], "t2: 2026-01-01T00:00:09") || !strings.HasSuffix(inv.First[1], "attempt a8") {
		t.Errorf("offenders %q, want t1's (with how long) then t2's (killed while it waited), oldest first", inv.First)
	}

	clean := t.TempDir()
	write(clean, "t1"+witnessLockSuffix, "")
	if inv, err := checkOverlaps(clean, 1); err != nil || inv.Count != 0 {
		t.Errorf("a witnessed run without overlaps: %+v, %v; want it to hold", inv, err)
	}
	if inv, err := checkOverlaps(t.TempDir(), 0); err != nil || inv.Count != 0 {
		t.Errorf("no stubborn task and no records: %+v, %v; want it to hold", inv, err)
	}
	if inv, err := checkOverlaps(t.TempDir(), 5); err != nil || inv.Count != 1 || !strings.Contains(inv.First[0], "none of the 5") {
		t.Errorf("5 stubborn tasks, none witnessed: %+v, %v; want one offence saying so", inv, err)
	}
}
