// Package redistest starts a real, throwaway redis-server for tests: a child
// process on a free port of 127.0.0.1, without persistence, stopped when the
// test ends (and killed with the test binary if that dies first).
//
// It needs the redis-server binary (Debian: apt-get install -y
// redis-server); without it the test fails and says so, it is not skipped.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/timerslack"
)

// startTimeout bounds how long the server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is a running redis-server.
type Server struct {
	// Addr is host:port, URL is redis://Addr/0.
	Addr, URL string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *bytes.Buffer
}

// Start starts a server for t and stops it in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (%v): install it with apt-get install -y redis-server", err)
	}
	var lastErr error
	// A free port can be taken by someone else between finding it and the
	// server binding it: try a few.
	for range 3 {
		s, err := start(bin, t.TempDir())
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func start(bin, dir string) (*Server, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes")
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	// Redis runs with the timer slack this process was started with
	// (platform/timerslack), as beside a deployment.
	if err := timerslack.StartChild(cmd.Start); err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, URL: "redis://" + addr + "/0", cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(s.done) }()

	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s does not answer PING after %s: %v", addr, startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the server and waits for it to exit. It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Kill)
	<-s.done
}
