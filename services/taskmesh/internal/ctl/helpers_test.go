package ctl

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/logbuf"
)

// testApp is an app that sees no environment, no home directory and no
// terminal, so the machine running the tests cannot leak settings in.
func testApp(env ...string) *app {
	a := defaultApp()
	vars := map[string]string{}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	a.env = environment{
		getenv:  func(k string) string { return vars[k] },
		homeDir: func() (string, error) { return "", errors.New("no home in tests") },
	}
	a.terminal = func(io.Writer) bool { return false }
	return a
}

// result is one finished command run.
type result struct {
	code           int
	stdout, stderr string
}

// run runs `taskmesh ctl args…` in process, as the binary does.
func (a *app) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr logbuf.Buffer
	code := a.main(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// silentServer accepts connections and never answers, as a hung server
// or a wrong port behind a firewall that accepts does; returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// refusedAddr is a loopback address where nothing listens.
func refusedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// runFor runs the command like run but with a context of d, and says how
// long it took: a command that should fail at once must not be ended by
// the deadline instead.
func (a *app) runFor(t *testing.T, d time.Duration, args ...string) (result, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stdout, stderr logbuf.Buffer
	start := time.Now()
	code := a.main(ctx, args, strings.NewReader(""), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}, time.Since(start)
}
