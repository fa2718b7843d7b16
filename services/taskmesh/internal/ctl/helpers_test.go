package ctl

import (
	"context"
	"errors"
	"io"
	"strings"
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
