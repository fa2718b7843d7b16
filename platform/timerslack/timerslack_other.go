//go:build !linux

package timerslack

import (
	"fmt"
	"runtime"
	"time"
)

// Current is unknown outside Linux: timer slack is a Linux setting.
func Current() (time.Duration, error) {
	return 0, fmt.Errorf("%w: no timer slack on %s", ErrNotApplied, runtime.GOOS)
}

func ensure(time.Duration) error { return nil }

func startAt(_ time.Duration, start func() error) error { return start() }
