package ctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// pendingFile is a file written beside its path, mode 0600, and renamed
// over the path only once it is whole: a failure midway leaves what was
// there before, and a path that cannot be written fails before anything
// is asked of the server (a token issued but lost, a result half written).
type pendingFile struct {
	path string
	tmp  *os.File
}

// createPending makes path's temporary file. Its error names path, not
// the temporary file, which the user never gave.
func createPending(path string) (*pendingFile, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, fmt.Errorf("%s cannot be written: %w", path, pathless(err))
	}
	return &pendingFile{path: path, tmp: tmp}, nil
}

func (f *pendingFile) Write(p []byte) (int, error) { return f.tmp.Write(p) }

// commit puts the file in place.
func (f *pendingFile) commit() error {
	err := f.tmp.Close()
	if err == nil {
		err = os.Rename(f.tmp.Name(), f.path)
	}
	if err != nil {
		_ = os.Remove(f.tmp.Name())
		return fmt.Errorf("%s cannot be written: %w", f.path, pathless(err))
	}
	return nil
}

// discard removes the temporary file unless it was committed; nil does
// nothing.
func (f *pendingFile) discard() {
	if f != nil {
		_ = f.tmp.Close()
		_ = os.Remove(f.tmp.Name()) // fails harmlessly after the rename
	}
}

// pathless is the reason of a file error without the path it names.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
