//go:build unix

package pgtest

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// exists reports whether process pid exists, zombies included (EPERM: it
// does, as another user). This is PostgreSQL's own test for a live
// postmaster.
func exists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// alive reports whether process pid exists and is not a zombie (a dead
// process its parent has not reaped yet; recognised where /proc exists).
func alive(pid int) bool {
	if !exists(pid) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
