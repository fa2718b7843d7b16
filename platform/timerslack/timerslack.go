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
// The slack is not for processes that start users' tasks: a task would
// inherit it through its shim, and a task's own timers are the user's.
package timerslack

import (
	"errors"
	"fmt"
	"os"
	"strings"
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
