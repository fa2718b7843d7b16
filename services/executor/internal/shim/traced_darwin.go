//go:build darwin

package shim

import (
	"errors"
	"syscall"
)

// errTraceDenied: the traced start is Linux's; elsewhere the trampoline
// does the job.
var errTraceDenied = errors.New("the traced start is not supported on this system")

func startTraced(string, []string, *syscall.ProcAttr, func(int) error) (int, error) {
	return 0, errTraceDenied
}

func setRlimits(int, int64, int64) error { return errTraceDenied }

// ProbeTracedStart reports that tasks cannot be started traced here.
func ProbeTracedStart(string) error { return errTraceDenied }
