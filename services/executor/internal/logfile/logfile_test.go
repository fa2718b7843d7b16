package logfile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestRotationKeepsRetainFiles(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Config{Dir: dir, MaxBytes: 100, Retain: 3})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 39) + "\n" // 40 bytes: two fit a file
	for i := range 9 {
		if _, err := w.Write([]byte(line[:len(line)-2] + string(rune('a'+i)) + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"agent.log", "agent.log.1", "agent.log.2"}) {
		t.Fatalf("files = %v", names)
	}
	// Newest in agent.log; no file over the limit; lines never split.
	for name, wantLast := range map[string]byte{"agent.log": 'i', "agent.log.1": 'h', "agent.log.2": 'f'} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) > 100 || len(b)%40 != 0 || b[len(b)-2] != wantLast {
			t.Errorf("%s = %q, %v", name, b, err)
		}
	}
	// Reopening appends to the current file.
	w, err = Open(Config{Dir: dir, MaxBytes: 100, Retain: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.size != 40 {
		t.Errorf("reopened size = %d, want 40", w.size)
	}
}

func TestConcurrentWritesLoseNothing(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Config{Dir: dir, MaxBytes: 1000, Retain: 100})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = w.Write([]byte("0123456789\n"))
			}
		})
	}
	wg.Wait()
	w.Close()
	total := 0
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		total += strings.Count(string(b), "0123456789\n")
	}
	if total != 400 {
		t.Errorf("%d lines kept of 400", total)
	}
}
