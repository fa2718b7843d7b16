package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The run and work roots are marked for ext4 to spread their
// subdirectories over block groups (internal/fsalloc); on a file system
// without the flag the agent starts all the same and says so in its
// debug log.
func TestAgentSpreadsItsRunAndWorkDirectories(t *testing.T) {
	h := newHarness(t, nil).start()
	var st unix.Statfs_t
	if err := unix.Statfs(h.cfg.DataDir, &st); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(h.cfg.DataDir, "runs"), filepath.Join(h.cfg.DataDir, "work")} {
		if st.Type != unix.EXT4_SUPER_MAGIC {
			if !strings.Contains(h.logs.String(), "directories not spread over block groups") {
				t.Fatalf("no word of %s left unmarked on a file system of type %#x", dir, st.Type)
			}
			continue
		}
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if flags&0x00020000 == 0 {
			t.Fatalf("%s: flags %#x lack the top-directory flag", dir, flags)
		}
	}
}
