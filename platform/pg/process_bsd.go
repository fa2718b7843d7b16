//go:build unix && !linux

package pg

import "syscall"

// setParentDeathSignal does nothing: only Linux can kill a child when its
// parent dies. Call LocalServer.Stop (pgtest.Main does).
func setParentDeathSignal(*syscall.SysProcAttr) {}

// freezeServer finds no children without /proc.
func freezeServer(int) []int { return nil }

// killClusterProcesses does nothing without /proc: backends exit by
// themselves once the postmaster is gone, and Start retries while their
// shared memory is still attached.
func killClusterProcesses(string, []int) {}

// isZombie cannot tell without /proc; a zombie then counts as alive, which
// only matters if the server's parent died without reaping it.
func isZombie(int) bool { return false }
