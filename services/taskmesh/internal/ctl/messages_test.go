package ctl

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
)

// A command that takes one id names what kind of id is missing.
func TestMissingIDsAreNamedByKind(t *testing.T) {
	for args, want := range map[string]string{
		"tasks get":      "no task id given",
		"services get":   "no service id given",
		"queues get":     "no queue id given",
		"groups delete":  "no group id given",
		"video delete":   "no video task id given",
		"groups get a b": "want one group id, got 2 arguments",
	} {
		r := testApp(EnvAPIKey, "tm_x").run(t, "", strings.Fields(args)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", args, r.code, r.stderr, ExitUsage, want)
		}
	}
}

// The usage table's first column is headed by what it groups by, stage
// included.
func TestUsageTableHeadsItsKeyColumn(t *testing.T) {
	for _, by := range []string{"day", "model", "queue", "flavor", "tenant", "stage"} {
		var b bytes.Buffer
		resp := &usagev1.GetUsageResponse{GroupBy: by, Currency: "CNY", Rows: []*usagev1.UsageRow{{Key: "k", StageSeconds: 1.5}},
			Total: &usagev1.UsageRow{Key: "total", StageSeconds: 1.5}}
		if err := writeUsage(&b, resp); err != nil {
			t.Fatal(err)
		}
		if head := strings.Fields(b.String()); len(head) == 0 || head[0] != strings.ToUpper(by) {
			t.Errorf("grouped by %s, the table begins %q", by, b.String())
		}
	}
}

// Mistakes the command line can tell are usage errors (exit 2) before
// anything is sent: here no server answers at all.
func TestCommandLineMistakesAreUsageErrors(t *testing.T) {
	for _, args := range []string{
		"tasks list --type bogus",
		"audit --from yesterday",
		"audit --to 2026-13-01",
		"usage --from nope",
		"tasks get x --timeout 0s",
		"tasks get x --timeout -1s",
		"services create --agent a",
		"services create --name n --agent a",
		"tasks list --since 2026-02-05 --until 2026-02-01",
	} {
		r := testApp(EnvAPIKey, "tm_x", EnvServer, "127.0.0.1:1").run(t, "", strings.Fields(args)...)
		if r.code != ExitUsage {
			t.Errorf("%s: exit %d, stderr %q; want %d", args, r.code, r.stderr, ExitUsage)
		}
	}
}

// A flag's value the Go parsers refuse is explained in words.
func TestFlagValuesAreExplainedInWords(t *testing.T) {
	for args, want := range map[string]string{
		"tasks list --limit abc":                  `invalid argument "abc" for "--limit" flag: not a whole number`,
		"tasks get x --timeout x":                 `invalid argument "x" for "--timeout" flag: not a duration (such as 30s, 5m or 1h)`,
		"tasks list --limit 99999999999999999999": "out of range",
	} {
		r := testApp(EnvAPIKey, "tm_x").run(t, "", strings.Fields(args)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "strconv") {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", args, r.code, r.stderr, ExitUsage, want)
		}
	}
}

// A server that cannot be reached is named by the address dialed, with
// the reason in a few words; the REST port given for the gRPC one is
// recognised.
func TestUnreachableServersAreNamedWithTheReason(t *testing.T) {
	rest := httptest.NewServer(http.NotFoundHandler())
	defer rest.Close()
	restAddr := strings.TrimPrefix(rest.URL, "http://")
	for server, want := range map[string]string{
		"127.0.0.1:1": "error: cannot reach 127.0.0.1:1: connection refused (code 503 unavailable)",
		restAddr:      "cannot reach " + restAddr + ": it answers HTTP/1.1, not gRPC: --server takes the gateway's gRPC port",
	} {
		r := testApp(EnvAPIKey, "tm_x", EnvServer, server).run(t, "", "tasks", "get", "x")
		if r.code != ExitError || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "transport:") {
			t.Errorf("%s: exit %d, stderr %q; want %q", server, r.code, r.stderr, want)
		}
	}
}

// A file written whole or not at all: its errors name the path given,
// never the temporary file beside it, and a discarded one leaves nothing.
func TestPendingFileNamesThePathGiven(t *testing.T) {
	dir := t.TempDir()
	if _, err := createPending(dir + "/no/such/out"); err == nil || err.Error() != dir+"/no/such/out cannot be written: no such file or directory" {
		t.Errorf("a path in no directory: %v", err)
	}
	f, err := createPending(dir + "/out")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	f.discard()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("a discarded file left %v", left)
	}
	f, _ = createPending(dir + "/out")
	_, _ = f.Write([]byte("whole"))
	if err := f.commit(); err != nil {
		t.Fatal(err)
	}
	f.discard()
	if b, _ := os.ReadFile(dir + "/out"); string(b) != "whole" {
		t.Errorf("committed %q", b)
	}
	if fi, _ := os.Stat(dir + "/out"); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}

// A server that takes the connection and never answers is named, with
// the time limit it did not meet.
func TestSilentServersAreNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	r := testApp(EnvAPIKey, "tm_x", EnvServer, l.Addr().String()).run(t, "", "tasks", "get", "x", "--timeout", "300ms")
	if want := "no answer from " + l.Addr().String() + " within --timeout"; r.code != ExitError || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}
