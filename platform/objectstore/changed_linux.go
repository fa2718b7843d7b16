package objectstore

import (
	"io/fs"
	"syscall"
	"time"
)

// changedAt is the later of a file's modification and inode change
// times. A temporary link made by FS.Copy has its source's modification
// time, which may be long past, but making the link changed the inode, so
// a fresh link is not taken for debris.
func changedAt(info fs.FileInfo) time.Time {
	t := info.ModTime()
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		if c := time.Unix(st.Ctim.Sec, st.Ctim.Nsec); c.After(t) {
			return c
		}
	}
	return t
}
