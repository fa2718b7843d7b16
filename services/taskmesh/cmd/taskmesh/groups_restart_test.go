package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// startBinary runs `taskmesh <args…>` (this test binary acting as the
// binary) and returns it and its output.
func startBinary(t *testing.T, args ...string) (*exec.Cmd, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TASKMESH_TEST_AS_BINARY=1")
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd, out
}

// A `taskmesh scheduler` process SIGKILLed while the middle of a DAG runs,
// and started again on the same database: the group completes, and no
// member ran twice (one line per member in its marker file, one lease and
// one success per member task in the event log).
func TestSchedulerKilledMidDAGResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := pgtest.New(t)
	broker := kafkatest.New(t)
	dir, err := os.MkdirTemp("", "tmdag") // short: the agents' shims put sockets under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("dag-test-internal-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	schedAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	schedArgs := []string{"scheduler", "--database-url", db.URL, "--kafka-brokers", strings.Join(broker.Addrs(), ","),
		"--internal-token-file", tokenFile, "--listen", schedAddr, "--agent-lost-after", "60s"}
	sched, schedOut := startBinary(t, schedArgs...)

	gwPool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: gateway.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer gwPool.Close()
	if err := pg.Migrate(ctx, gwPool, gateway.Schema, gateway.Migrations()...); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(ctx, gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: schedAddr,
		InternalToken: "dag-test-internal-token", DB: gwPool, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gwDone := make(chan error, 1)
	go func() { gwDone <- gw.Run(ctx) }()
	defer func() { cancel(); <-gwDone }()
	creds := gw.Credentials()
	if _, err := creds.CreateTenant(ctx, "acme", "Acme", gateway.TierStandard); err != nil {
		t.Fatal(err)
	}
	_, key, err := creds.CreateAPIKey(ctx, "acme", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{"agent-1", "agent-2"} {
		_, tok, err := creds.CreateAgentToken(ctx, agent, "", []string{"127.0.0.1/32"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tf := filepath.Join(dir, agent+".token")
		if err := os.WriteFile(tf, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		startBinary(t, "executor", "--agent-id", agent, "--machine-id", "m-"+agent, "--server", gw.GRPCAddr(), "--token-file", tf,
			"--data-dir", filepath.Join(dir, agent), "--slots", "2", "--claim-wait", "2s", "--heartbeat-interval", "300ms", "--local-api", "")
	}

	api := "http://" + gw.HTTPAddr()
	call := func(method, path string, body any) (int, map[string]any) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, api+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		out := map[string]any{}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	wait := func(d time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\nscheduler:\n%s", what, schedOut)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	marker := func(name string) string { return filepath.Join(dir, name+".runs") }
	step := func(id, sleep string, deps ...string) map[string]any {
		return map[string]any{"id": id, "name": id, "type": "script", "depends_on": deps,
			"command": fmt.Sprintf("echo run >> %s; sleep %s", marker(id), sleep)}
	}
	var groupID string
	wait(60*time.Second, "the group to be created", func() bool {
		code, g := call("POST", "/api/v1/task-groups", map[string]any{"mode": "dag", "start": true, "tasks": []any{step("download", "0"),
			step("process1", "4", "download"), step("process2", "4", "download"), step("merge", "0", "process1", "process2")}})
		groupID, _ = g["id"].(string)
		return code == 200
	})
	wait(60*time.Second, "both branches to run", func() bool {
		_, err1 := os.Stat(marker("process1"))
		_, err2 := os.Stat(marker("process2"))
		return err1 == nil && err2 == nil
	})
	_ = syscall.Kill(-sched.Process.Pid, syscall.SIGKILL)
	_ = sched.Wait()
	killedAt := time.Now()
	_, schedOut = startBinary(t, schedArgs...)

	wait(90*time.Second, "the group to complete after the restart", func() bool {
		code, g := call("GET", "/api/v1/task-groups/"+groupID, nil)
		c, _ := g["counts"].(map[string]any)
		return code == 200 && g["status"] == "completed" && c["completed"] == float64(4)
	})
	for _, m := range []string{"download", "process1", "process2", "merge"} {
		b, err := os.ReadFile(marker(m))
		if err != nil || strings.Count(string(b), "run\n") != 1 {
			t.Errorf("%s ran %d times (%v)", m, strings.Count(string(b), "run\n"), err)
		}
	}
	pool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: scheduler.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT t.id, count(*) FILTER (WHERE e.event_type = 'TaskLeased'), count(*) FILTER (WHERE e.event_type = 'TaskSucceeded')
		FROM tasks t JOIN events e ON e.aggregate_id = t.id WHERE t.group_id = $1 GROUP BY t.id`, groupID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id string
		var leases, successes int
		if err := rows.Scan(&id, &leases, &successes); err != nil {
			t.Fatal(err)
		}
		n++
		if leases != 1 || successes != 1 {
			t.Errorf("task %s: %d leases, %d successes", id, leases, successes)
		}
	}
	rows.Close()
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = 'TaskGroupCompleted'`, groupID).Scan(&completed); err != nil || n != 4 || completed != 1 {
		t.Fatalf("%d member tasks, %d TaskGroupCompleted (%v)", n, completed, err)
	}
	// The branches ended after the kill: the restarted scheduler took their
	// results and moved the group on.
	var lastBranchEnd time.Time
	if err := pool.QueryRow(ctx, `SELECT max(e.occurred_at) FROM events e JOIN tasks t ON t.id = e.aggregate_id
		WHERE t.group_id = $1 AND e.event_type = 'TaskSucceeded' AND t.doc->'spec'->>'name' IN ('process1', 'process2')`, groupID).Scan(&lastBranchEnd); err != nil {
		t.Fatal(err)
	}
	if !lastBranchEnd.After(killedAt) {
		t.Fatalf("the branches ended at %v, before the scheduler was killed at %v", lastBranchEnd, killedAt)
	}
	// The inline projections agree with a rebuild from the events.
	rep, err := scheduler.RebuildInlineProjection(ctx, pool, false)
	if err != nil || rep.Groups != 1 || len(rep.Differences) != 0 {
		t.Fatalf("rebuild: %+v, %v", rep, err)
	}
}
