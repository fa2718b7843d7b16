package objectstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
)

// testSecret is a fixed 32-byte HMAC key for tests.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newTestFS(t *testing.T, mutate ...func(*objectstore.FSConfig)) (*objectstore.FS, objectstore.FSConfig) {
	t.Helper()
	cfg := objectstore.FSConfig{
		Root:    filepath.Join(t.TempDir(), "store"),
		BaseURL: "http://127.0.0.1:1/objects",
		Secret:  testSecret,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	fs, err := objectstore.NewFS(cfg)
	if err != nil {
		t.Fatalf("NewFS: %v", err)
	}
	return fs, cfg
}

func TestFSStore(t *testing.T) {
	storeSuite(t, func(t *testing.T) objectstore.Store {
		_, srvFS := newFSServer(t, nil)
		return srvFS
	})
}

func TestNewFSValidation(t *testing.T) {
	dir := t.TempDir()
	ok := objectstore.FSConfig{Root: filepath.Join(dir, "r"), BaseURL: "http://h/objects", Secret: testSecret}
	for name, mutate := range map[string]func(*objectstore.FSConfig){
		"no root":           func(c *objectstore.FSConfig) { c.Root = "" },
		"short secret":      func(c *objectstore.FSConfig) { c.Secret = testSecret[:31] },
		"no secret":         func(c *objectstore.FSConfig) { c.Secret = nil },
		"relative base":     func(c *objectstore.FSConfig) { c.BaseURL = "/objects" },
		"ftp base":          func(c *objectstore.FSConfig) { c.BaseURL = "ftp://h/objects" },
		"base with query":   func(c *objectstore.FSConfig) { c.BaseURL = "http://h/objects?a=b" },
		"base with user":    func(c *objectstore.FSConfig) { c.BaseURL = "http://u:p@h/objects" },
		"negative max":      func(c *objectstore.FSConfig) { c.MaxPutBytes = -1 },
		"root is a file":    func(c *objectstore.FSConfig) { c.Root = filepath.Join(dir, "file") },
		"root below a file": func(c *objectstore.FSConfig) { c.Root = filepath.Join(dir, "file", "sub") },
	} {
		if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := ok
		mutate(&cfg)
		if _, err := objectstore.NewFS(cfg); err == nil {
			t.Errorf("%s: NewFS accepted %v", name, cfg)
		}
	}
	if _, err := objectstore.NewFS(ok); err != nil {
		t.Fatalf("NewFS(valid): %v", err)
	}
	st, err := os.Stat(ok.Root)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o700 {
		t.Errorf("root created with mode %v, want 0700", perm)
	}
	// Reopening an existing root works and keeps objects.
	fs1, _ := objectstore.NewFS(ok)
	mustPut(t, fs1, "keep", []byte("kept"), "")
	fs2, err := objectstore.NewFS(ok)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if got, _ := readAll(t, fs2, "keep"); string(got) != "kept" {
		t.Errorf("after reopen: %q", got)
	}
}

// A symlink planted inside Root must not lead reads or writes outside it.
func TestFSRefusesSymlinkEscape(t *testing.T) {
	fs, cfg := newTestFS(t)
	outside := t.TempDir()
	objects := filepath.Join(cfg.Root, "objects")
	// The outside file is a well-formed object file, so only the refusal to
	// follow the link (not a parse error) can keep it from being served.
	mustPut(t, fs, "template", []byte("outside secret"), "")
	secret, err := os.ReadFile(filepath.Join(objects, "template"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Delete(context.Background(), "template"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(objects, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(objects, "filelink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../../../"+outside, filepath.Join(objects, "rellink")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"dirlink/secret", "filelink", "rellink/secret"} {
		if rc, _, err := fs.Open(ctx, key); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			t.Errorf("Open(%q) followed a symlink out of root, read %q", key, b)
		}
		if _, err := fs.Stat(ctx, key); err == nil {
			t.Errorf("Stat(%q) followed a symlink out of root", key)
		}
	}
	if _, err := fs.Put(ctx, "dirlink/planted", strings.NewReader("x"), 1, ""); err == nil {
		t.Error("Put through a symlinked directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file written outside root: %v", err)
	}
	// Replacing a symlinked key replaces the link, never the target.
	mustPut(t, fs, "filelink", []byte("new"), "")
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || !bytes.Equal(b, secret) {
		t.Errorf("outside file changed: %q, %v", b, err)
	}
	// Deleting removes the link, not the target.
	mustPut(t, fs, "dirlink2", []byte("x"), "")
	if err := os.Remove(filepath.Join(objects, "dirlink2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(objects, "dirlink2")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Delete(ctx, "dirlink2"); err != nil {
		t.Errorf("Delete of a symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("Delete removed the symlink's target: %v", err)
	}
}

func TestFSKeyConflicts(t *testing.T) {
	fs, _ := newTestFS(t)
	ctx := context.Background()
	mustPut(t, fs, "a", []byte("object a"), "")
	if _, err := fs.Put(ctx, "a/b", strings.NewReader("x"), 1, ""); err == nil {
		t.Error("Put below an object succeeded")
	}
	mustPut(t, fs, "c/d", []byte("x"), "")
	if _, err := fs.Put(ctx, "c", strings.NewReader("x"), 1, ""); err == nil {
		t.Error("Put over a directory of keys succeeded")
	}
	if got, _ := readAll(t, fs, "c/d"); string(got) != "x" {
		t.Errorf("c/d = %q after conflicting Put", got)
	}
	if _, err := fs.Stat(ctx, "a/b"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat below an object = %v, want ErrNotFound", err)
	}
	if err := fs.Delete(ctx, "c"); err != nil {
		t.Errorf("Delete of a key prefix = %v, want nil", err)
	}
	if got, _ := readAll(t, fs, "c/d"); string(got) != "x" {
		t.Errorf("Delete of prefix touched c/d: %q", got)
	}
}

// An Open reader keeps the version it opened while Put replaces it.
func TestFSOpenReaderSurvivesReplace(t *testing.T) {
	fs, _ := newTestFS(t)
	mustPut(t, fs, "k", []byte("old contents"), "")
	rc, info, err := fs.Open(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	mustPut(t, fs, "k", []byte("new"), "")
	b, err := io.ReadAll(rc)
	if err != nil || string(b) != "old contents" || info.Size != int64(len("old contents")) {
		t.Errorf("read %q, %v, info %+v; want the old version", b, err, info)
	}
	if _, ok := rc.(io.Seeker); !ok {
		t.Error("FS Open reader is not an io.Seeker")
	}
}

func TestFSCorruptObjectNotServed(t *testing.T) {
	fs, cfg := newTestFS(t)
	mustPut(t, fs, "k", []byte("0123456789"), "")
	name := filepath.Join(cfg.Root, "objects", "k")
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(name, st.Size()-3); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(context.Background(), "k"); err == nil || errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat of truncated object = %v, want a corruption error", err)
	}
	if err := os.WriteFile(name, []byte("not an object file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fs.Open(context.Background(), "k"); err == nil {
		t.Error("Open of a foreign file succeeded")
	}
}

// Failed and finished Puts leave no temporary files; stale ones from a
// crash are removed when the store is opened again.
func TestFSTempFiles(t *testing.T) {
	fs, cfg := newTestFS(t)
	ctx := context.Background()
	mustPut(t, fs, "ok", []byte("x"), "")
	if _, err := fs.Put(ctx, "bad", strings.NewReader("short"), 100, ""); err == nil {
		t.Fatal("short Put succeeded")
	}
	tmp := filepath.Join(cfg.Root, "tmp")
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("tmp holds %d entries after Puts", len(entries))
	}
	stale := filepath.Join(tmp, "put-stale")
	fresh := filepath.Join(tmp, "put-fresh")
	for _, n := range []string{stale, fresh} {
		if err := os.WriteFile(n, []byte("debris"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := objectstore.NewFS(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file removed: %v", err)
	}
}

func TestFSModTimeFromClock(t *testing.T) {
	clock := clocktest.NewFixed(time.Now().Truncate(time.Second))
	clock.Advance(-72 * time.Hour)
	fs, _ := newTestFS(t, func(c *objectstore.FSConfig) { c.Now = clock.Now })
	info := mustPut(t, fs, "k", []byte("x"), "")
	if !info.ModTime.Equal(clock.Now()) {
		t.Errorf("ModTime = %v, want injected %v", info.ModTime, clock.Now())
	}
	if st, err := fs.Stat(context.Background(), "k"); err != nil || !st.ModTime.Equal(clock.Now()) {
		t.Errorf("Stat ModTime = %v, %v", st.ModTime, err)
	}
}
