package stack

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// options are a stack's on a fresh database and a temporary directory.
func options(t *testing.T, db *pgtest.DB) Options {
	t.Helper()
	dir, err := os.MkdirTemp("", "tmstack") // short: the agent puts sockets under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DatabaseURL: db.URL,
		Logger: slog.New(slog.DiscardHandler)}
}

// ownSessions returns a count of the sessions the stack's services hold
// on db.
func ownSessions(t *testing.T, db *pgtest.DB) func() int {
	admin := db.Open(t, "public")
	return func() int {
		t.Helper()
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND application_name LIKE 'taskmesh-%'`, db.Name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A component that fails after Start (here the local agent, whose API
// address is taken) ends Wait with its error, and the others stop too.
func TestAFailingComponentStopsTheStack(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	db := pgtest.New(t)
	o := options(t, db)
	o.Agent, o.AgentLocalAPI = true, busy.Addr().String()
	s, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Wait(ctx); err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Fatalf("Wait = %v, want the agent's listen error", err)
	}
	if resp, err := http.Get(s.HTTPURL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("the gateway still serves after another component failed")
	}
	sessions := ownSessions(t, db)
	waitFor(t, "the services' pools to close", func() bool { return sessions() == 0 })
}

// A Start that fails part way (the gateway's port is taken) stops the
// services it had already started and closes their pools.
func TestStartReleasesWhatItStartedWhenItFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	db := pgtest.New(t)
	o := options(t, db)
	o.GRPCAddr = busy.Addr().String()
	if s, err := Start(context.Background(), o); err == nil || !strings.Contains(err.Error(), "listen grpc") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start = %v, want the gateway's listen error", err)
	}
	sessions := ownSessions(t, db)
	waitFor(t, "the services' pools to close", func() bool { return sessions() == 0 })
}
