package logthrottle

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/logbuf"
)

// timers is a hand-driven afterFunc: the test ends windows itself.
type timers struct {
	mu      sync.Mutex
	pending []func()
}

func (t *timers) afterFunc(d time.Duration, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = append(t.pending, f)
}

// fire ends every window open now.
func (t *timers) fire() {
	t.mu.Lock()
	due := t.pending
	t.pending = nil
	t.mu.Unlock()
	for _, f := range due {
		f()
	}
}

func (t *timers) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

func newLimiter() (*Limiter, *timers) {
	l := New(10 * time.Second)
	ts := &timers{}
	l.afterFunc = ts.afterFunc
	return l, ts
}

func newLogger(level slog.Level) (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
	return slog.New(h), &buf
}

func lines(logs string) []string {
	s := strings.TrimSpace(logs)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestRepeatsWithinAWindowAreOneLine(t *testing.T) {
	l, ts := newLimiter()
	log, buf := newLogger(slog.LevelInfo)
	ctx := context.Background()

	l.Log(ctx, log, slog.LevelWarn, "database unavailable", "request", 1)
	if got := lines(buf.String()); len(got) != 1 || got[0] != `level=WARN msg="database unavailable" request=1` {
		t.Fatalf("first line: %q", got)
	}
	for i := 2; i <= 6; i++ {
		l.Log(ctx, log, slog.LevelWarn, "database unavailable", "request", i)
	}
	if got := lines(buf.String()); len(got) != 1 {
		t.Fatalf("repeats within the window were written: %q", got)
	}

	ts.fire() // the window ends with five repeats: one line, the last one's attributes
	got := lines(buf.String())
	want := `level=WARN msg="database unavailable" request=6 repeated=5 window=10s`
	if len(got) != 2 || got[1] != want {
		t.Fatalf("after the window: %q, want a second line %q", got, want)
	}

	// The outage goes on: the next window folds its repeats the same way.
	l.Log(ctx, log, slog.LevelWarn, "database unavailable", "request", 7)
	if got := lines(buf.String()); len(got) != 2 {
		t.Fatalf("a repeat in the second window was written at once: %q", got)
	}
	ts.fire()
	if got := lines(buf.String()); len(got) != 3 || got[2] != `level=WARN msg="database unavailable" request=7 repeated=1 window=10s` {
		t.Fatalf("second window: %q", got)
	}

	// A window without repeats ends the run: no line, no timer, and the
	// next occurrence is written at once.
	ts.fire()
	if got := lines(buf.String()); len(got) != 3 {
		t.Fatalf("a quiet window wrote: %q", got)
	}
	if n := ts.open(); n != 0 {
		t.Fatalf("%d windows open after a quiet one", n)
	}
	l.Log(ctx, log, slog.LevelWarn, "database unavailable", "request", 8)
	if got := lines(buf.String()); len(got) != 4 || got[3] != `level=WARN msg="database unavailable" request=8` {
		t.Fatalf("after the run ended: %q", got)
	}
	if len(l.runs) != 1 {
		t.Fatalf("%d runs held, want 1", len(l.runs))
	}
	ts.fire()
	if len(l.runs) != 0 {
		t.Fatalf("%d runs held after they ended, want 0", len(l.runs))
	}
}

func TestLinesAreRepeatsOnlyOfTheSameLoggerLevelAndMessage(t *testing.T) {
	l, _ := newLimiter()
	a, bufA := newLogger(slog.LevelInfo)
	b, bufB := newLogger(slog.LevelInfo)
	ctx := context.Background()

	l.Log(ctx, a, slog.LevelWarn, "database unavailable")
	l.Log(ctx, a, slog.LevelError, "database unavailable")
	l.Log(ctx, a, slog.LevelWarn, "credential store unavailable")
	l.Log(ctx, b, slog.LevelWarn, "database unavailable")
	if got := lines(bufA.String()); len(got) != 3 {
		t.Errorf("logger a: %q, want 3 lines (two levels, two messages)", got)
	}
	if got := lines(bufB.String()); len(got) != 1 {
		t.Errorf("logger b: %q, want its own first line", got)
	}
}

func TestADisabledLevelIsNeitherWrittenNorCounted(t *testing.T) {
	l, ts := newLimiter()
	log, buf := newLogger(slog.LevelError)
	l.Log(context.Background(), log, slog.LevelWarn, "database unavailable")
	ts.fire()
	if got := lines(buf.String()); len(got) != 0 {
		t.Fatalf("wrote %q below the handler's level", got)
	}
	if len(l.runs) != 0 || ts.open() != 0 {
		t.Fatalf("held %d runs and %d windows for a disabled level", len(l.runs), ts.open())
	}
}

func TestTheLastRepeatsArgumentsAreNotChanged(t *testing.T) {
	l, ts := newLimiter()
	log, _ := newLogger(slog.LevelInfo)
	ctx := context.Background()
	l.Log(ctx, log, slog.LevelWarn, "m")
	args := make([]any, 2, 8) // room to append into
	args[0], args[1] = "k", "v"
	l.Log(ctx, log, slog.LevelWarn, "m", args...)
	ts.fire()
	if got := args[:cap(args)][2]; got != nil {
		t.Fatalf("the window's line appended into the caller's arguments: %v", got)
	}
}

// TestConcurrentLinesAreAllCounted runs under -race in make test: every
// line is either written or counted in a written line.
func TestConcurrentLinesAreAllCounted(t *testing.T) {
	l := New(time.Millisecond) // real timers
	var buf logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				l.Log(context.Background(), log, slog.LevelWarn, "database unavailable")
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		open := len(l.runs)
		l.mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs still open", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	total := 0
	for _, ln := range lines(buf.String()) {
		total++
		if i := strings.Index(ln, "repeated="); i >= 0 {
			var n int
			for _, c := range ln[i+len("repeated="):] {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			total += n - 1
		}
	}
	if total != goroutines*each {
		t.Fatalf("lines written and counted: %d, want %d", total, goroutines*each)
	}
}
