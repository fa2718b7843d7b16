package pg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// prepareDataDir creates and initdb's dataDir unless it already holds a
// cluster.
func (s *LocalServer) prepareDataDir(ctx context.Context, dataDir, binDir string, owner *osUser) error {
	// PG_VERSION marks a cluster: a data directory from an earlier run is
	// reused as it is.
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	fi, err := os.Stat(dataDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		parent := filepath.Dir(dataDir)
		_, perr := os.Stat(parent)
		createdParent := errors.Is(perr, os.ErrNotExist)
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return fmt.Errorf("pg: create data dir: %w", err)
		}
		// MkdirAll made the new parent ours with mode 0700; the server's
		// user has to pass through it to reach its data directory, so it
		// gets the parent too.
		if createdParent {
			if err := chownTo(parent, owner); err != nil {
				return err
			}
		}
	case err != nil:
		return fmt.Errorf("pg: data dir: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("pg: data dir %s is not a directory", dataDir)
	default:
		entries, err := os.ReadDir(dataDir)
		if err != nil {
			return fmt.Errorf("pg: data dir: %w", err)
		}
		if len(entries) > 0 {
			// Most likely an initdb that was killed half-way; initdb would
			// refuse it too, with a less helpful message.
			return fmt.Errorf("pg: data dir %s is not empty but holds no PostgreSQL cluster (no PG_VERSION; an interrupted initdb?): remove it or empty it", dataDir)
		}
	}
	if err := chownTo(dataDir, owner); err != nil {
		return err
	}
	// Before initdb, which would fail with a less clear message: the
	// server's user must be able to reach the directory through every
	// parent.
	if err := checkReachable(dataDir, owner); err != nil {
		return err
	}
	return s.initdb(ctx, dataDir, binDir, owner)
}

func (s *LocalServer) initdb(ctx context.Context, dataDir, binDir string, owner *osUser) error {
	// UTF8 and the C locale whatever the machine's settings: sorting and
	// comparisons of text then do not depend on where the server was
	// initialised.
	args := []string{"-D", dataDir, "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-instructions"}
	if !s.Durable {
		args = append(args, "--no-sync")
	}
	auth := "trust"
	if s.Password != "" {
		pwfile, err := writePasswordFile(s.Password, owner)
		if err != nil {
			return err
		}
		defer os.Remove(pwfile)
		args = append(args, "--pwfile="+pwfile)
		auth = "scram-sha-256"
	}
	args = append(args, "--auth-host="+auth, "--auth-local="+auth)

	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), args...)
	cmd.Dir = dataDir
	cmd.Env = childEnv()
	cmd.SysProcAttr = procAttr(owner)
	// initdb runs postgres in bootstrap and single-user mode as children;
	// on cancellation kill them all, not just initdb.
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("pg: initdb %s: %w\n%s", dataDir, err, bytes.TrimSpace(out))
	}
	return nil
}

// writePasswordFile writes the superuser password for initdb --pwfile to a
// 0600 temporary file readable by owner (the server user); the caller
// removes it. A file, unlike the command line, is not visible to other users
// in ps.
func writePasswordFile(password string, owner *osUser) (string, error) {
	if strings.ContainsAny(password, "\r\n") {
		return "", errors.New("pg: LocalServer.Password may not contain line breaks")
	}
	f, err := os.CreateTemp("", "taskmesh-pwfile-*")
	if err != nil {
		return "", fmt.Errorf("pg: password file: %w", err)
	}
	name := f.Name()
	_, err = f.WriteString(password + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = chownTo(name, owner)
	}
	if err != nil {
		os.Remove(name)
		return "", fmt.Errorf("pg: password file: %w", err)
	}
	return name, nil
}

// childEnv is the environment of initdb and postgres: ours, with messages
// forced to English so the log can be matched by startError.
func childEnv() []string {
	return append(os.Environ(), "LC_ALL=C")
}
