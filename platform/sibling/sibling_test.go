package sibling

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sibling is found beside the executable, through a symlink to it, and
// only when it can run.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "taskmesh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Of(exe, "taskmesh-stage"); got != "" {
		t.Errorf("found %q in a directory without it", got)
	}
	stage := filepath.Join(dir, "taskmesh-stage")
	if err := os.WriteFile(stage, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Of(exe, "taskmesh-stage"); got != stage {
		t.Errorf("Of = %q, want %q", got, stage)
	}
	// A link to the binary elsewhere (a PATH entry) finds the real file's
	// siblings, not the link's.
	links := t.TempDir()
	link := filepath.Join(links, "taskmesh")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	if got := Of(link, "taskmesh-stage"); got != stage {
		t.Errorf("through a symlink: %q, want %q", got, stage)
	}
	if err := os.Chmod(stage, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Of(exe, "taskmesh-stage"); got != "" {
		t.Errorf("a file that is not executable was taken: %q", got)
	}
	if err := os.Remove(stage); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Of(exe, "taskmesh-stage"); got != "" {
		t.Errorf("a directory was taken: %q", got)
	}
}

func TestRunnable(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		path string
		want string
	}{
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "is a directory"},
	} {
		if err := Runnable(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Runnable(%s) = %v, want %q", c.path, err, c.want)
		}
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Runnable(plain); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("Runnable(plain file) = %v, want not executable", err)
	}
}
