// Package logthrottle keeps an outage from writing a log line per request.
//
// While Postgres restarts or a service is down, every request a gateway or
// a service answers with 503 met the same failure, and a line for each
// buried everything else in the logs: in a four-minute run of `taskmesh
// chaos`, one scheduler wrote 1,443 "database unavailable" lines and one
// gateway 822 of its own. A Limiter writes the first line of such a run at
// once and folds the repeats into one line per window, which carries the
// last repeat's attributes and how many lines it stands for
// (docs/operations.md, "Logs during an outage").
package logthrottle

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Window is the window services use: an outage shows as one line at its
// start and one every ten seconds while it lasts.
const Window = 10 * time.Second

// Limiter folds repeats of a log line within its window. Lines are the
// same when they have the same logger, level and message; their
// attributes (the error, a request id) may differ. Loggers are compared
// by identity, so a limiter serves long-lived loggers (a server's), not
// ones made per request. The window's line is written from a timer, up to
// a window after the last repeat and so possibly after the service that
// logged stopped: a logger's output must take a line at any time (a
// test's t.Log does not once the test is over). The zero value is not
// usable; call New.
type Limiter struct {
	window time.Duration
	// afterFunc runs f once d has passed: time.AfterFunc, or a test's
	// hand-driven timer.
	afterFunc func(d time.Duration, f func())

	mu   sync.Mutex
	runs map[line]*run
}

// line identifies lines that are repeats of each other.
type line struct {
	log   *slog.Logger
	level slog.Level
	msg   string
}

// run is a line's current window: the repeats it has not written yet.
type run struct {
	repeated int
	args     []any // the last repeat's attributes
}

// New returns a Limiter with the given window.
func New(window time.Duration) *Limiter {
	return &Limiter{window: window, runs: make(map[line]*run),
		afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// Log writes msg with args through log at level, unless the same line was
// written within the window: then it is counted, and written when the
// window ends as one line with the last repeat's args and
// "repeated"=<count> "window"=<window>. A window that ends with no repeat
// ends the run: the next line is written at once again.
func (l *Limiter) Log(ctx context.Context, log *slog.Logger, level slog.Level, msg string, args ...any) {
	if !log.Enabled(ctx, level) {
		return
	}
	k := line{log: log, level: level, msg: msg}
	l.mu.Lock()
	if r, ok := l.runs[k]; ok {
		r.repeated++
		r.args = args
		l.mu.Unlock()
		return
	}
	l.runs[k] = &run{}
	l.mu.Unlock()
	l.afterFunc(l.window, func() { l.endWindow(k) })
	log.Log(ctx, level, msg, args...)
}

// endWindow writes the repeats of k's window, if any, and opens the next
// window; without repeats the run is over.
func (l *Limiter) endWindow(k line) {
	l.mu.Lock()
	r := l.runs[k]
	if r.repeated == 0 {
		delete(l.runs, k)
		l.mu.Unlock()
		return
	}
	n := r.repeated
	args := append(append(make([]any, 0, len(r.args)+4), r.args...), "repeated", n, "window", l.window.String())
	r.repeated, r.args = 0, nil
	l.mu.Unlock()
	l.afterFunc(l.window, func() { l.endWindow(k) })
	k.log.Log(context.Background(), k.level, k.msg, args...)
}
