package pg

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/timerslack"
)

// freePort picks a port free on 127.0.0.1 right now. Someone else may take
// it before postgres binds it; Start retries then.
func freePort() (int, error) {
	p, err := freeport.Port()
	if err != nil {
		return 0, fmt.Errorf("pg: %w", err)
	}
	return p, nil
}

// serverProc is one run of the postmaster.
type serverProc struct {
	cmd       *exec.Cmd
	pid       int
	done      chan struct{} // closed when the postmaster has exited
	waitErr   error         // set before done is closed
	log       *os.File
	logOffset int64 // size of the log when this run started; errors quote what follows
	closeOnce sync.Once
}

func (s *LocalServer) spawn(dataDir, binDir, logPath string, port int, owner *osUser) (*serverProc, error) {
	params := map[string]string{"max_connections": "300"}
	if !s.Durable {
		// A server that is not Durable (tests) flushes nothing: a crash of
		// the machine loses its data, which nobody keeps anyway, and every
		// commit stops waiting for the disk.
		params["fsync"] = "off"
		params["synchronous_commit"] = "off"
		params["full_page_writes"] = "off"
	}
	for k, v := range s.Params {
		// Setting names are case-insensitive; lower-case them so that an
		// override replaces the default instead of racing it.
		params[strings.ToLower(k)] = v
	}
	// Loopback TCP only, so nothing outside the machine reaches a
	// development server; and no Unix socket, so servers of different data
	// directories never compete for one socket directory or need it
	// writable.
	args := []string{"-D", dataDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="}
	// Sorted, so the same settings always give the same command line.
	for _, k := range slices.Sorted(maps.Keys(params)) {
		args = append(args, "-c", k+"="+params[k])
	}

	// Read-write: errors quote the log (logTail).
	logf, err := os.OpenFile(logPath, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pg: server log: %w", err)
	}
	// The log is appended to across runs; an error quotes only what this run
	// wrote, from offset on.
	offset, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("pg: server log: %w", err)
	}
	cmd := exec.Command(filepath.Join(binDir, "postgres"), args...)
	cmd.Dir = dataDir
	cmd.Env = childEnv()
	// The server writes to the log file through the inherited descriptor, so
	// it needs no permission on the file itself and nothing in this process
	// copies its output.
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = procAttr(owner)
	// Postgres runs with the timer slack this process was started with,
	// as it would beside a deployment, not a server's coarser one
	// (platform/timerslack).
	if err := timerslack.StartChild(cmd.Start); err != nil {
		logf.Close()
		return nil, fmt.Errorf("pg: start postgres: %w", err)
	}
	p := &serverProc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), log: logf, logOffset: offset}
	go func() {
		// Reaped as soon as it exits: an unreaped postmaster is a zombie,
		// which PostgreSQL still counts as running (see runningPostmaster).
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// startError is a failed start, carrying the server log of that attempt.
type startError struct {
	msg        string
	log        string
	portTaken  bool // the port was in use
	shmemInUse bool // processes of a killed server still hold its shared memory
}

func (e *startError) Error() string {
	if e.log == "" {
		return e.msg
	}
	return e.msg + "; server log:\n" + e.log
}

// waitReady waits until the postmaster reports "ready" in postmaster.pid
// (which, unlike a successful connection, cannot come from another server
// that happens to listen on the port) and then accepts a connection.
func (s *LocalServer) waitReady(ctx context.Context, p *serverProc, dataDir string, port int) error {
	// A server is up within tens of milliseconds, so a coarser tick would
	// dominate start-up.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			log := p.logTail()
			return &startError{
				msg:        fmt.Sprintf("pg: postgres on %s exited during startup (%v)", dataDir, p.waitErr),
				log:        log,
				portTaken:  strings.Contains(log, "could not bind") || strings.Contains(log, "could not create any TCP/IP sockets"),
				shmemInUse: strings.Contains(log, "pre-existing shared memory block"),
			}
		case <-ctx.Done():
			return &startError{msg: fmt.Sprintf("pg: postgres on %s did not become ready: %v", dataDir, ctx.Err()), log: p.logTail()}
		case <-tick.C:
		}
		// postmaster.pid first, then a connection: the file proves that our
		// postmaster is the one answering, the connection that it accepts
		// clients.
		if !postmasterReady(dataDir, p.pid) {
			continue
		}
		err := s.ping(ctx, port)
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code != "57P03" { // 57P03: cannot connect now
			// The server answered but refuses us, e.g. DataDir was
			// initialized with another password.
			return &startError{msg: fmt.Sprintf("pg: postgres on %s is up but refuses the connection: %v", dataDir, err)}
		}
	}
}

func (s *LocalServer) ping(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig(s.urlWithPort("postgres", port))
	if err != nil {
		return err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func (s *LocalServer) urlWithPort(database string, port int) string {
	c := &LocalServer{Port: port, Password: s.Password}
	return c.URL(database)
}

// postmasterReady reports whether dataDir/postmaster.pid belongs to pid and
// has reached status "ready" (line 8, written once connections are accepted).
func postmasterReady(dataDir string, pid int) bool {
	lines := pidFileLines(dataDir)
	return len(lines) >= 8 && lines[0] == strconv.Itoa(pid) && strings.TrimSpace(lines[7]) == "ready"
}

// runningPostmaster returns the pid recorded in dataDir/postmaster.pid if
// that process exists, else 0; zombie tells it has exited but not been
// reaped, which to PostgreSQL is still a running postmaster. A stale file left
// by a killed and reaped server is fine: postgres replaces it.
func runningPostmaster(dataDir string) (pid int, zombie bool) {
	lines := pidFileLines(dataDir)
	if len(lines) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 || !processExists(pid) {
		return 0, false
	}
	return pid, isZombie(pid)
}

func pidFileLines(dataDir string) []string {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// logTail returns the end of what this run wrote to the server log.
func (p *serverProc) logTail() string {
	const maxTail = 4 << 10
	fi, err := p.log.Stat()
	if err != nil {
		return ""
	}
	start := max(p.logOffset, fi.Size()-maxTail)
	buf := make([]byte, fi.Size()-start)
	n, _ := p.log.ReadAt(buf, start)
	return strings.TrimSpace(string(buf[:n]))
}

func (p *serverProc) closeLog() {
	p.closeOnce.Do(func() { p.log.Close() })
}

// kill SIGKILLs the postmaster and then its server processes. Backends put
// themselves in their own sessions, so killing the postmaster's process group
// does not reach them; they notice the postmaster's death and exit soon, but
// a new postmaster refuses to start while any of them still holds the old
// shared memory, hence the sweep. The sweep only happens if this postmaster
// owned dataDir: one that failed to start because another server runs there
// must not take that server's processes with it.
func (p *serverProc) kill(dataDir string) {
	lines := pidFileLines(dataDir)
	owned := len(lines) > 0 && lines[0] == strconv.Itoa(p.pid)
	var children []int
	if owned {
		children = freezeServer(p.pid)
	}
	_ = killGroup(p.pid)
	<-p.done
	if owned {
		killClusterProcesses(dataDir, children)
	}
}
