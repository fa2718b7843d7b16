package pg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LocalServer is a PostgreSQL server Taskmesh runs itself from the system's
// binaries: one per test package (see package pgtest), and the `taskmesh dev`
// database.
//
// The server listens on 127.0.0.1 only and has no Unix socket. When the
// process runs as root, initdb and postgres (which refuse to run as root) run
// as the "postgres" OS user, which must then be able to reach DataDir. On
// Linux the server is killed when the process that started it dies (parent
// death signal), so a crashed test binary leaves no server behind; elsewhere
// call Stop.
//
// The fields are read by Start; change them only while the server is stopped.
type LocalServer struct {
	DataDir  string            // PGDATA; initdb'd when empty or missing
	BinDir   string            // "" = FindBinDir()
	Port     int               // 0 = pick a free port on 127.0.0.1 (fixed once started)
	Durable  bool              // false: fsync=off, synchronous_commit=off, full_page_writes=off (tests). true: PostgreSQL defaults.
	Password string            // "" = trust auth on 127.0.0.1 (tests); else scram-sha-256 for user "postgres" with this password
	Params   map[string]string // extra -c settings (e.g. max_connections)
	LogPath  string            // server log file; "" = DataDir/../postgres.log

	mu   sync.Mutex
	proc *serverProc // the running postmaster; nil when stopped
}

// URL returns the connection URL of database on this server:
// postgres://postgres[:password]@127.0.0.1:Port/database?sslmode=disable.
// Port is only known once the server has started when it was 0.
func (s *LocalServer) URL(database string) string {
	s.mu.Lock()
	port := s.Port
	s.mu.Unlock()
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	if s.Password != "" {
		u.User = url.UserPassword("postgres", s.Password)
	}
	return u.String()
}

// reservedParams are settings Start controls: the server must listen on
// 127.0.0.1 only, on the port Start chose, and in DataDir.
var reservedParams = []string{"listen_addresses", "port", "unix_socket_directories", "data_directory"}

// Start initializes DataDir if it holds no cluster yet, starts postgres and
// waits until it accepts connections or ctx is done (give ctx a deadline:
// recovery after a crash can take a while and Start waits for it).
//
// initdb runs with UTF8 encoding, the C locale (so sorting and server messages
// do not depend on the machine), superuser "postgres" and trust or
// scram-sha-256 authentication depending on Password. The password only
// matters at initdb: changing it for an existing DataDir makes Start fail to
// connect, with an error saying so.
//
// postgres runs with listen_addresses=127.0.0.1, no Unix socket,
// max_connections=300, and when not Durable fsync, synchronous_commit and
// full_page_writes off; Params overrides all but the addresses, port and data
// directory. A DataDir in use by a running server is an error.
//
// With Port 0 a free port is picked; if another process takes it before
// postgres binds it, Start retries with another port. The port is then kept,
// so restarting after Stop or Kill reuses it.
func (s *LocalServer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.proc.done: // exited on its own; start afresh
			s.proc.closeLog()
			s.proc = nil
		default:
			return fmt.Errorf("pg: local server on %s is already started", s.DataDir)
		}
	}
	if s.DataDir == "" {
		return errors.New("pg: LocalServer.DataDir is empty")
	}
	dataDir, err := filepath.Abs(s.DataDir)
	if err != nil {
		return fmt.Errorf("pg: data dir: %w", err)
	}
	for k := range s.Params {
		if slices.Contains(reservedParams, strings.ToLower(k)) {
			return fmt.Errorf("pg: LocalServer.Params may not set %s", k)
		}
	}
	binDir := s.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return err
		}
	} else if !hasServerBinaries(binDir) {
		return fmt.Errorf("%w (BinDir=%s does not contain both)", ErrNoBinaries, binDir)
	}
	owner, err := serverOwner()
	if err != nil {
		return err
	}
	if err := s.prepareDataDir(ctx, dataDir, binDir, owner); err != nil {
		return err
	}
	if err := waitForReap(ctx, dataDir); err != nil {
		return err
	}

	logPath := s.LogPath
	if logPath == "" {
		logPath = filepath.Join(filepath.Dir(dataDir), "postgres.log")
	}
	for attempt := 1; ; attempt++ {
		port := s.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return err
			}
		}
		proc, err := s.spawn(dataDir, binDir, logPath, port, owner)
		if err != nil {
			return err
		}
		err = s.waitReady(ctx, proc, dataDir, port)
		if err == nil {
			s.Port = port
			s.proc = proc
			return nil
		}
		proc.kill(dataDir)
		proc.closeLog()
		var se *startError
		if !errors.As(err, &se) || attempt >= 5 || ctx.Err() != nil ||
			!(se.portTaken && s.Port == 0 || se.shmemInUse) {
			return err
		}
		// A port race or old backends still detaching from shared memory
		// after Kill: both clear up by themselves.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// reapWait bounds how long Start waits for an exited server to be reaped.
const reapWait = 15 * time.Second

// waitForReap returns once no server runs on dataDir. A server that has
// exited but is still a zombie (its parent, e.g. a `taskmesh dev` killed
// with SIGKILL, died first) is reaped by whoever inherits it, usually
// within moments, and PostgreSQL refuses to start until then: Start waits
// for that, up to reapWait, rather than failing a restart that would work
// a moment later. A live server is an error at once.
func waitForReap(ctx context.Context, dataDir string) error {
	deadline := time.Now().Add(reapWait)
	for {
		pid, zombie := runningPostmaster(dataDir)
		switch {
		case pid == 0:
			return nil
		case !zombie:
			return fmt.Errorf("pg: a PostgreSQL server (pid %d) is already running on %s; stop it first "+
				"(or, if no such server exists, remove %s)", pid, dataDir, filepath.Join(dataDir, "postmaster.pid"))
		case time.Now().After(deadline):
			return fmt.Errorf("pg: the server that last ran on %s (pid %d) has exited but its parent has not reaped it in %s; "+
				"PostgreSQL refuses to start until then", dataDir, pid, reapWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop shuts the server down (SIGINT: fast shutdown, which rolls back open
// transactions, disconnects clients and writes a checkpoint), waits up to 15
// s, then SIGKILLs it. Safe to call twice and on a server that was never
// started.
func (s *LocalServer) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	defer p.closeLog()
	if err := interrupt(p.pid); err != nil {
		select {
		case <-p.done:
			return nil // already gone
		default:
		}
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		p.kill(s.absDataDir())
		return fmt.Errorf("pg: postgres on %s did not shut down within 15s and was killed", s.DataDir)
	}
}

// Kill SIGKILLs the server and its backends now, as a crash would, for crash
// tests. What the server had written survives (the OS keeps it), so committed
// transactions survive unless synchronous_commit is off, as it is by default
// when not Durable: then the last fraction of a second of commits may be
// lost. Start may be called again afterwards on the same DataDir; it runs
// crash recovery, and releases the shared memory the killed server left
// behind (a System V segment and files in /dev/shm that only PostgreSQL can
// identify), so after a Kill always Start again before removing DataDir.
// Safe to call on a stopped server.
func (s *LocalServer) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	p.kill(s.absDataDir())
	p.closeLog()
	return nil
}

func (s *LocalServer) absDataDir() string {
	d, err := filepath.Abs(s.DataDir)
	if err != nil {
		return s.DataDir
	}
	return d
}
