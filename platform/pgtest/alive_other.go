//go:build !unix

package pgtest

// exists and alive claim every process is alive, so no run directory is
// ever taken for stale: pg.LocalServer does not run on these systems anyway.
func exists(int) bool { return true }

func alive(int) bool { return true }
