package fsalloc_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskmesh/taskmesh/services/executor/internal/fsalloc"
	"golang.org/x/sys/unix"
)

const topDir = 0x00020000

func flagsOf(t *testing.T, dir string) uint32 {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	return flags
}

func onExt4(t *testing.T, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.EXT4_SUPER_MAGIC
}

func TestSpreadSubdirsMarksOnlyTheDirectory(t *testing.T) {
	dir := t.TempDir()
	if !onExt4(t, dir) {
		t.Skipf("%s is not on ext4, the file system the flag is for", dir)
	}
	before := flagsOf(t, dir)
	if err := fsalloc.SpreadSubdirs(dir); err != nil {
		t.Fatal(err)
	}
	if got := flagsOf(t, dir); got != before|topDir {
		t.Fatalf("flags %#x, want %#x (the ones before, and the top-directory flag)", got, before|topDir)
	}
	// A second mark changes nothing and is no error.
	if err := fsalloc.SpreadSubdirs(dir); err != nil {
		t.Fatal(err)
	}
	// The flag is not inherited: a run directory made under it is an
	// ordinary directory, so its own files stay together.
	sub := filepath.Join(dir, "run-1")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if flagsOf(t, sub)&topDir != 0 {
		t.Fatal("a subdirectory inherited the top-directory flag")
	}
}

func TestSpreadSubdirsRefusesWhatIsNotADirectoryItCanMark(t *testing.T) {
	if err := fsalloc.SpreadSubdirs(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
	// /proc does not keep inode flags.
	if err := fsalloc.SpreadSubdirs("/proc"); err == nil {
		t.Fatal("marked /proc")
	}
}
