//go:build !linux

package fsalloc

import "errors"

// SpreadSubdirs is a Linux (ext4) hint; elsewhere there is nothing to
// mark.
func SpreadSubdirs(string) error { return errors.ErrUnsupported }
