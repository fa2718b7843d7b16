package logbuf

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Loggers on several goroutines write while the test reads; every line
// arrives whole (run with -race).
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				log.Info("line", "writer", i, "n", j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, "msg=line") {
			t.Fatalf("a broken line: %q", l)
		}
	}
	if got := fmt.Sprint(strings.Count(b.String(), "writer=7")); got != "50" {
		t.Errorf("writer 7 wrote %s lines, want 50", got)
	}
}
