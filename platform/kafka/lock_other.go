//go:build !unix

package kafka

import "os"

// lockDir is a no-op where flock is unavailable: running two brokers on one
// data dir is then the caller's responsibility.
func lockDir(string) (*os.File, error) { return nil, nil }

func unlockDir(*os.File) {}
