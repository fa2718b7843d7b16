// Package sibling finds the small programs shipped beside the taskmesh
// binary: taskmesh-shim, which starts every task, and taskmesh-stage,
// which runs every stage of a conversion job. Each is a few megabytes of
// the code it needs, so it starts in about a millisecond and a half of
// CPU, where the whole taskmesh binary takes some twenty (its package
// initialisers and page faults); both run once per task, so the
// difference is paid per task (docs/decisions/0075-small-shim-binary.md,
// docs/decisions/0091-small-stage-worker-binary.md).
//
// A sibling that is missing is not an error: callers fall back to the
// taskmesh binary's own subcommand, which does the same work slower.
package sibling

import (
	"fmt"
	"os"
	"path/filepath"
)

// The programs shipped beside taskmesh, by file name.
const (
	// Shim starts and watches one task (services/executor/cmd/taskmesh-shim).
	Shim = "taskmesh-shim"
	// Stage runs one stage of a conversion job
	// (services/executor/cmd/taskmesh-stage).
	Stage = "taskmesh-stage"
)

// Of is the program named name in the directory of the executable exe
// (after resolving exe's symlinks, so a link to taskmesh on the PATH finds
// the siblings of the real file); "" when there is none that can run.
func Of(exe, name string) string {
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if Runnable(p) != nil {
		return ""
	}
	return p
}

// OfSelf is Of for this process's executable.
func OfSelf(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return Of(exe, name)
}

// Runnable says why p cannot be run as a program (nil if it can).
func Runnable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}
