//go:build !linux

package objectstore

import (
	"io/fs"
	"time"
)

// changedAt is the file's modification time where the inode change time
// is not read (see changed_linux.go).
func changedAt(info fs.FileInfo) time.Time { return info.ModTime() }
