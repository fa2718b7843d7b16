package fsalloc

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// topDir is FS_TOPDIR_FL (chattr +T), which ext4 reads as "spread this
// directory's subdirectories over the block groups". It is not
// inherited, so only the marked directory's own children are spread.
const topDir = 0x00020000

// SpreadSubdirs marks dir as the top of a directory hierarchy. Only ext4
// knows the flag: other file systems refuse it (EOPNOTSUPP, ENOTTY), and
// the caller goes on without it, since it only changes where inodes are
// placed.
func SpreadSubdirs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return fmt.Errorf("reading the flags of %s: %w", dir, err)
	}
	if flags&topDir != 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|topDir)); err != nil {
		return fmt.Errorf("marking %s as a top directory: %w", dir, err)
	}
	return nil
}
