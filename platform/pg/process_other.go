//go:build !unix

package pg

import (
	"errors"
	"syscall"
)

// LocalServer relies on Unix process groups, signals and credentials.
var errUnsupported = errors.New("pg: LocalServer needs Linux or macOS; use an existing server instead")

type osUser struct{}

func serverOwner() (*osUser, error)         { return nil, errUnsupported }
func chownTo(string, *osUser) error         { return errUnsupported }
func checkReachable(string, *osUser) error  { return errUnsupported }
func procAttr(*osUser) *syscall.SysProcAttr { return nil }
func killGroup(int) error                   { return errUnsupported }
func interrupt(int) error                   { return errUnsupported }
func processExists(int) bool                { return false }
func isZombie(int) bool                     { return false }
func freezeServer(int) []int                { return nil }
func killClusterProcesses(string, []int)    {}
