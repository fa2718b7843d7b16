// Package timerslack gives a Taskmesh server process a coarser Linux timer
// slack than the kernel's 50 µs, so that the Go runtime's monitor thread
// wakes less often (docs/operations.md, "Timer slack";
// docs/decisions/0123-server-processes-run-with-a-millisecond-of-timer-slack.md).
//
// Why: the runtime's sysmon thread sleeps 20 µs at a time for at least a
// millisecond after every wake-up of a process that was idle, and a
// service under a steady trickle of requests is woken hundreds of times a
// second. Each of those sleeps is a context switch, and on a virtual
// machine a context switch is expensive: measured under load, the
// monitor threads of the services took about a tenth of a 2-core machine.
// Timer slack lets the kernel end a sleep up to the slack later, so a
// 20 µs sleep lasts about a millisecond and the same millisecond of
// watching costs one wake-up instead of dozens. Sleeps of the process's
// own timers (time.Sleep, deadlines, tickers) may end up to the slack
// late too; a wake-up by I/O (a request, a reply) is not delayed.
//
// Slack is a property of each thread, copied to the threads it creates,
// and kept across execve. The Go runtime creates its threads, sysmon
// first, before any code of the program runs, so setting it on the
// running process would reach only the calling thread. Ensure therefore
// sets it on the calling thread and executes the program again, in the
// same process (same pid, arguments and environment): the new image's
// first thread has the slack, and every thread the runtime makes from it
// inherits it. A process whose slack already is what is asked for is left
// alone, so the second image goes straight on.
//
// A process started from a thread inherits that thread's slack, and a
// user's task must not: its own timers are the user's. So Ensure
// remembers the slack the process was started with (carried across its
// execution again in the environment, then removed from it), and
// StartChild starts a process from a thread set back to that slack for
// the moment of the fork. A process that starts users' work (the
// executor) starts all of it through StartChild.
package timerslack

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Default is the slack of a server process when the environment does not
// say otherwise.
const Default = time.Millisecond

// Max is the largest slack Ensure sets: beyond it timers would be late by
// more than a request's budget.
const Max = 100 * time.Millisecond

// EnvVar overrides Default: a duration ("500us", "2ms"), or "off" to leave
// the process's slack as it was started with.
const EnvVar = "TASKMESH_TIMER_SLACK"

// Choose returns the slack a server process should run with, from the
// value of EnvVar (empty: Default). ok is false for "off".
func Choose(env string) (slack time.Duration, ok bool, err error) {
	env = strings.TrimSpace(env)
	switch env {
	case "":
		return Default, true, nil
	case "off":
		return 0, false, nil
	}
	d, err := time.ParseDuration(env)
	if err != nil {
		return 0, false, fmt.Errorf("%s=%q: not a duration (say 1ms) or off", EnvVar, env)
	}
	if d <= 0 || d > Max {
		return 0, false, fmt.Errorf("%s=%q: out of range: more than 0 and at most %s, or off", EnvVar, env, Max)
	}
	return d, true, nil
}

// ErrNotApplied says the slack could not be set; the process runs on with
// the slack it has.
var ErrNotApplied = errors.New("timer slack not applied")

// Ensure makes this process run with the slack that EnvVar asks for
// (Default when it is unset): when the calling thread's slack differs, it
// sets it and executes the program again, and does not return. It returns
// nil when the slack already is that (or "off"), and an error, with the
// process unchanged but for the calling thread, when the slack cannot be
// set or the program cannot be executed again; the caller goes on.
func Ensure() error {
	want, ok, err := Choose(os.Getenv(EnvVar))
	if err != nil || !ok {
		return err
	}
	return ensure(want)
}

// inheritedEnv carries the slack the process was started with, in
// nanoseconds, across Ensure's execution of the program again. The second
// image reads it and removes it from its environment, so that no process
// it starts sees it.
const inheritedEnv = "TASKMESH_TIMER_SLACK_INHERITED"

// inherited is the slack this process was started with, once Ensure found
// its slack in place; 0 when Ensure did not run or changed nothing, and
// StartChild then has nothing to restore.
var inherited atomic.Int64

// Inherited is the slack the process was started with, before Ensure
// changed it; 0 when Ensure has not set a slack of its own.
func Inherited() time.Duration { return time.Duration(inherited.Load()) }

// adoptInherited records the slack the process was started with, as the
// image before the execution again passed it on, and removes it from the
// environment. cur is the slack now: without a value passed on the
// process was started with the slack it has, and children get it too.
func adoptInherited(cur time.Duration) {
	v, passed := os.LookupEnv(inheritedEnv)
	_ = os.Unsetenv(inheritedEnv)
	n, err := strconv.ParseInt(v, 10, 64)
	if !passed || err != nil || n <= 0 || n == int64(cur) {
		return
	}
	inherited.Store(n)
}

// StartChild runs start, which starts a process (os/exec's Start,
// syscall.ForkExec), on a thread whose slack is, for the moment, the one
// this process was started with, so that the process starts with it
// instead of this process's (the child copies the forking thread's). It
// is start itself when the slack was not changed, or cannot be set back:
// the child then has this process's, a coarser timer, and still runs.
func StartChild(start func() error) error {
	want := Inherited()
	if want == 0 {
		return start()
	}
	return startAt(want, start)
}

// CombinedOutput is cmd.CombinedOutput with cmd started through
// StartChild.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := StartChild(cmd.Start); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}
