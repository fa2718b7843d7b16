//go:build unix

package pg

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// osUser is the account initdb and postgres run as when this process is root.
type osUser struct {
	name     string
	uid, gid uint32
}

// serverOwner returns nil when the server can run as the current user, and
// the "postgres" account when running as root: initdb and postgres refuse to
// run as root, since a compromised server would own the machine.
func serverOwner() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pg: running as root, so the server must run as the postgres user, but looking it up failed (create it, e.g. `useradd --system postgres`, or run as a non-root user): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pg: postgres user has non-numeric uid %q / gid %q", u.Uid, u.Gid)
	}
	return &osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

func chownTo(path string, u *osUser) error {
	if u == nil {
		return nil
	}
	if err := os.Chown(path, int(u.uid), int(u.gid)); err != nil {
		return fmt.Errorf("pg: give %s to the %s user: %w", path, u.name, err)
	}
	return nil
}

// checkReachable reports, before initdb fails with a terse "permission
// denied", when a directory above dataDir cannot be searched by the server
// user (typically a 0700 temporary directory created by root). The server
// runs without supplementary groups, so only owner, group and other bits
// count.
func checkReachable(dataDir string, u *osUser) error {
	if u == nil {
		return nil
	}
	for dir := filepath.Dir(dataDir); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("pg: data dir: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			mode := uint32(fi.Mode().Perm())
			searchable := mode&0o001 != 0 ||
				st.Gid == u.gid && mode&0o010 != 0 ||
				st.Uid == u.uid && mode&0o100 != 0
			if !searchable {
				return fmt.Errorf("%w: the %s user, which runs the server because this process is root, cannot reach %s: %s is mode %v; put the data directory elsewhere or make that directory searchable (chmod o+x)",
					ErrUnreachableDataDir, u.name, dataDir, dir, fi.Mode().Perm())
			}
		}
		if parent := filepath.Dir(dir); parent == dir {
			return nil
		}
	}
}

// procAttr makes the child a process group leader (so it can be killed with
// everything it forks that stays in its group, and a terminal's ^C reaches
// only us, leaving shutdown to Stop), runs it as u when set, and on Linux
// kills it when this process dies.
func procAttr(u *osUser) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		attr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid}
	}
	setParentDeathSignal(attr)
	return attr
}

func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// interrupt asks the postmaster for a fast shutdown.
func interrupt(pid int) error {
	return syscall.Kill(pid, syscall.SIGINT)
}

// processExists reports whether pid exists, zombies included (EPERM: it
// exists but belongs to another user). This is PostgreSQL's own test for a
// running postmaster.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
