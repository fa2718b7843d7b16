package shim

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// Main is the shim's command line; args follow `executor shim` (or the
// taskmesh-shim binary's name):
//
//	serve -dir <run dir>                          run the shim for a run directory
//	host -socket <path>                           serve the run directories asked for on path (host.go)
//	exec -as <bytes> -cpu <seconds> [-cgroup dirs] [-uid N -gid N] -- <path> <argv...>
//	                                              join, drop privileges, set limits, execve
//
// It returns the process exit code. The video runner (`executor shim
// video`) is the taskmesh binary's, not the shim's: the shim stays small
// so that it starts fast (docs/decisions/0075-small-shim-binary.md).
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: shim serve -dir DIR | shim host -socket PATH | shim exec -as N -cpu N -- PATH ARGV...")
		return 2
	}
	switch args[0] {
	case "serve":
		fs := flag.NewFlagSet("shim serve", flag.ContinueOnError)
		dir := fs.String("dir", "", "run directory holding spec.json")
		if err := fs.Parse(args[1:]); err != nil || *dir == "" {
			return 2
		}
		return serve(*dir)
	case "host":
		fs := flag.NewFlagSet("shim host", flag.ContinueOnError)
		socket := fs.String("socket", "", "control socket to listen on")
		if err := fs.Parse(args[1:]); err != nil || *socket == "" {
			return 2
		}
		return hostMain(*socket)
	case "exec":
		return execMain(args[1:])
	}
	fmt.Fprintf(os.Stderr, "shim: unknown command %q\n", args[0])
	return 2
}

// execMain is `shim exec`: the task's first steps, in this order, before
// it execs: join its cgroup (root may still write cgroup.procs), drop to
// the sandbox user, set the rlimits.
func execMain(args []string) int {
	fs := flag.NewFlagSet("shim exec", flag.ContinueOnError)
	as := fs.Int64("as", 0, "RLIMIT_AS in bytes (0: unchanged)")
	cpu := fs.Int64("cpu", 0, "RLIMIT_CPU in seconds (0: unchanged)")
	dirs := fs.String("cgroup", "", "comma-separated cgroup directories to join")
	uid := fs.Int("uid", -1, "user to run as (-1: unchanged)")
	gid := fs.Int("gid", -1, "group to run as (-1: unchanged)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) < 2 {
		fmt.Fprintln(os.Stderr, "shim exec: need PATH and ARGV")
		return 2
	}
	if *dirs != "" {
		g := cgroup.Group{Dirs: strings.Split(*dirs, ",")}
		if err := g.Join(); err != nil {
			fmt.Fprintf(os.Stderr, "shim exec: %v\n", err)
			return 127
		}
	}
	if *uid >= 0 {
		if err := dropTo(*uid, *gid); err != nil {
			fmt.Fprintf(os.Stderr, "shim exec: %v\n", err)
			return 127
		}
	}
	err := execLimited(*as, *cpu, rest[0], rest[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "shim exec: %v\n", err)
	return 127
}
