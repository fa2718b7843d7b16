package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The event log shows an attempt ending when the server says it ended: a
// lease that expired with its agent closes the attempt there, and the
// next one may be leased at once. Whether the first attempt's process
// really stopped is something no event records: an agent that was stopped
// or cut off, or a task that ignores SIGTERM, leaves it running while the
// second one starts. The witness is a task process that makes this
// visible from the processes themselves. Every run of it takes an
// exclusive flock on a file named after its task; the kernel holds that
// lock exactly as long as the process (or a copy of its descriptor)
// lives, and drops it when the process dies however it dies, SIGKILL
// included. A second run of the same task that finds the lock taken is
// therefore running while another run of that task is still alive: it
// leaves an overlap file behind, and the process overlaps invariant
// counts those files after the drain.

// Names of the witness's files in its directory.
const (
	witnessLockSuffix    = ".lock"
	witnessOverlapSuffix = ".overlap"
)

// witnessTime is fixed-width, so that the overlap records sort by time as
// text.
const witnessTime = "2006-01-02T15:04:05.000000Z"

// witnessHold is how long a stubborn task's witness holds its lock: longer
// than an agent-stop or agent-cut fault takes to get its tasks leased
// elsewhere (the agent is lost about 4 s after its last heartbeat, and
// its released tasks may be leased again within the same second), so a
// run that started shortly before such a fault is still alive when the
// next run of its task starts.
const witnessHold = 8 * time.Second

// witnessCommand is the command line of a witness run: bin (an absolute
// path, as the agents start it without a shell or a PATH of the
// driver's) as `chaos witness` in dir, holding its lock for hold.
func witnessCommand(bin, dir string, hold time.Duration) []string {
	return []string{bin, "chaos", "witness", "--dir", dir, "--hold", hold.String()}
}

// Witness is one run of the witness for the attempt attemptID of task
// taskID: it ignores SIGTERM for the whole process, takes the task's lock
// in dir and holds it for hold. If another process holds the lock, it
// first writes <task>.<attempt>.overlap in dir (when, this run, and what
// the holder wrote about itself), then waits for the lock, adds to the
// record how long that took (how long the two runs overlapped), and goes
// on as any run.
//
// SIGTERM is ignored so the run behaves like a task that does not stop
// when asked: only its own end or a SIGKILL ends it, which is the case
// where an agent that asked politely and moved on leaves a process
// behind.
//
// A run that finds the lock taken waits rather than fails. Failing
// would end the attempt at once, and the task's next attempt, a second
// later, would find the same live process again: one overlap would
// spend every retry, fail the task for good and leave a record per
// attempt. Waiting leaves one record per overlapping run, measures the
// overlap, and keeps the task's outcome what it would be without the
// witness. The record is written before the wait, so that a run killed
// while it waits has left it; the wait is bounded by the holder's own
// hold, and by the task's timeout.
func Witness(dir string, hold time.Duration, taskID, attemptID string) error {
	// First, so that a stop requested while the lock is being taken is
	// ignored as well.
	signal.Ignore(syscall.SIGTERM)
	if err := witnessName(taskID); err != nil {
		return fmt.Errorf("witness: TASKMESH_TASK_ID %w", err)
	}
	// The overlap record is named <task>.<attempt>: a task id (a UUID)
	// without dots is what lets the check read the task back from it.
	if strings.Contains(taskID, ".") {
		return fmt.Errorf("witness: TASKMESH_TASK_ID %q has a dot", taskID)
	}
	if attemptID == "" {
		attemptID = "unknown"
	} else if err := witnessName(attemptID); err != nil {
		return fmt.Errorf("witness: TASKMESH_ATTEMPT_ID %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, taskID+witnessLockSuffix), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	// Open until the hold is over: closing the descriptor drops the lock.
	defer f.Close()
	self := describeRun(attemptID)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("witness: flock %s: %w", f.Name(), err)
		}
		if err := waitOverlap(f, filepath.Join(dir, taskID+"."+attemptID+witnessOverlapSuffix), self); err != nil {
			return fmt.Errorf("witness: task %s: %w", taskID, err)
		}
	}
	// Who holds the lock, for the overlap a later run may find. A run
	// that finds the lock taken before this is written reads the previous
	// holder's words or nothing; the overlap itself is certain either way.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%s since %s\n", self, time.Now().UTC().Format(witnessTime))), 0)
	}
	time.Sleep(hold)
	return nil
}

// waitOverlap records that lock is held by another run (record, first
// line), waits until it is free and takes it, then adds when and after
// how long (second line).
func waitOverlap(lock *os.File, record, self string) error {
	found := time.Now()
	holder, _ := os.ReadFile(lock.Name())
	if err := appendLine(record, fmt.Sprintf("%s %s started while the lock was held by: %s", found.UTC().Format(witnessTime), self,
		orUnknown(strings.TrimSpace(string(holder))))); err != nil {
		return err
	}
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("flock %s: %w", lock.Name(), err)
		}
	}
	now := time.Now()
	return appendLine(record, fmt.Sprintf("%s the holder ended %s later", now.UTC().Format(witnessTime), now.Sub(found).Round(time.Millisecond)))
}

func appendLine(name, line string) error {
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, werr := out.WriteString(line + "\n")
	if cerr := out.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// describeRun names this run: its attempt, its pid and its working
// directory (which, on an agent, lies under that agent's data directory
// and so names the agent).
func describeRun(attemptID string) string {
	wd, _ := os.Getwd()
	return fmt.Sprintf("attempt %s pid %d in %s", attemptID, os.Getpid(), orUnknown(wd))
}

// witnessName refuses an id that cannot be a plain file name.
func witnessName(id string) error {
	switch {
	case id == "":
		return errors.New("is not set (the witness runs as a task)")
	case id == "." || id == ".." || strings.ContainsAny(id, "/\x00"):
		return fmt.Errorf("%q is not a plain file name", id)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// checkOverlaps counts the overlap files the witness runs left in dir:
// each is a run of a task that started while another run of the same
// task was still alive. The lock files say how many tasks were witnessed
// at all; when stubborn tasks were accepted and none ran the witness, the
// invariant would hold for want of a witness, so that is an offence too.
func checkOverlaps(dir string, stubborn int) (Invariant, error) {
	inv := Invariant{Name: "process overlaps"}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return inv, err
	}
	var witnessed int
	var overlaps []string
	for _, e := range entries {
		switch name := e.Name(); {
		case strings.HasSuffix(name, witnessLockSuffix):
			witnessed++
		case strings.HasSuffix(name, witnessOverlapSuffix):
			overlaps = append(overlaps, name)
		}
	}
	inv.Checked = fmt.Sprintf("%d of %d stubborn tasks witnessed", witnessed, stubborn)
	// Oldest first: the first overlap of a run is the one that names the
	// fault that caused it.
	found := make([]overlapRecord, 0, len(overlaps))
	for _, name := range overlaps {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return inv, err
		}
		task, _, _ := strings.Cut(strings.TrimSuffix(name, witnessOverlapSuffix), ".") // the task id has no dot
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		at, _, _ := strings.Cut(lines[0], " ")
		text := task + ": " + truncate(lines[0], 400)
		if len(lines) > 1 {
			// "<time> the holder ended … later"; absent when this run
			// was killed while it waited.
			_, ended, _ := strings.Cut(lines[1], " ")
			text += "; " + ended
		}
		found = append(found, overlapRecord{at: at, text: text})
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].at != found[j].at {
			return found[i].at < found[j].at
		}
		return found[i].text < found[j].text
	})
	for _, o := range found {
		inv.offend(o.text)
	}
	if stubborn > 0 && witnessed == 0 {
		inv.offend("the witness ran for none of the " + strconv.Itoa(stubborn) + " stubborn tasks")
	}
	return inv, nil
}

type overlapRecord struct{ at, text string }
