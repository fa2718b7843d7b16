package executor_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

// TestMain routes `<test binary> executor shim ...` to Shim, as the
// taskmesh binary routes `taskmesh executor shim ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim" {
		os.Exit(executor.Shim(os.Args[3:]))
	}
	os.Exit(m.Run())
}

func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tmex")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// runAgent starts executor.Run and returns a function that stops it and
// waits for it to return.
func runAgent(t *testing.T, cfg executor.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- executor.Run(ctx, cfg) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("run did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	leasetest.WaitFor(t, 10*time.Second, "pid file", func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestAgentRestart stops the agent while a task runs and starts a new one
// on the same data directory.
func TestAgentRestart(t *testing.T) {
	tests := []struct {
		name string
		// away runs while no agent is attached.
		away        func(t *testing.T, f *leasetest.Fake, id string, pid int)
		orphanGrace time.Duration
		release     bool // let the task finish after the restart
		wantCode    int32
		wantStdout  string
		wantErr     string
	}{
		{
			name:    "reattaches and completes",
			release: true, orphanGrace: 10 * time.Second, wantCode: 5, wantStdout: "before\nafter\n",
			away: func(t *testing.T, _ *leasetest.Fake, _ string, pid int) {
				if !alive(pid) {
					t.Fatal("the task died with its agent")
				}
			},
		},
		{
			name: "lease lost while away", orphanGrace: 10 * time.Second,
			wantCode: 143, wantStdout: "before\n", wantErr: "lease lost while the agent was away: 30003",
			away: func(t *testing.T, f *leasetest.Fake, id string, _ int) { f.ExpireLease(id) },
		},
		{
			name: "orphaned after the grace", orphanGrace: time.Second,
			wantCode: 143, wantStdout: "before\n", wantErr: "orphaned: no agent attached for 1s",
			away: func(t *testing.T, _ *leasetest.Fake, _ string, pid int) {
				begin := time.Now()
				leasetest.WaitFor(t, 10*time.Second, "shim stops the orphan", func() bool { return !alive(pid) })
				if took := time.Since(begin); took < 800*time.Millisecond {
					t.Errorf("orphan stopped after %s, before the 1s grace", took)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := leasetest.Start(t)
			dir := shortDir(t)
			pidFile, goFile := filepath.Join(dir, "pid"), filepath.Join(dir, "go")
			id := fake.Add(&taskv1.Task{Name: "long", Type: "script", Timeout: 60, GracePeriodSec: 1,
				Command: `echo before; echo $$ > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done; echo after; exit 5`,
				Args:    []string{pidFile, goFile}})[0]
			cfg := executor.Config{
				AgentID: "agent-r", Server: fake.Addr(), DataDir: filepath.Join(dir, "data"),
				ClaimWait: time.Second, HeartbeatInterval: 200 * time.Millisecond,
				OrphanGrace: tc.orphanGrace,
			}
			stop := runAgent(t, cfg)
			pid := readPID(t, pidFile)
			stop()
			attempt := fake.Attempt(id)
			renewsBefore := len(fake.Calls("RenewTaskLease"))
			tc.away(t, fake, id, pid)

			runAgent(t, cfg)
			leasetest.WaitFor(t, 10*time.Second, "recovery renewal", func() bool {
				return len(fake.Calls("RenewTaskLease")) > renewsBefore
			})
			if tc.release {
				os.WriteFile(goFile, nil, 0o600)
			}
			c := fake.WaitComplete(t, id, 15*time.Second)
			if c.GetAttemptId() != attempt || c.GetExitCode() != tc.wantCode || c.GetStdout() != tc.wantStdout ||
				!strings.HasPrefix(c.GetError(), tc.wantErr) {
				t.Errorf("completion exit %d stdout %q error %q, want %d %q %q", c.GetExitCode(), c.GetStdout(),
					c.GetError(), tc.wantCode, tc.wantStdout, tc.wantErr)
			}
			if alive(pid) {
				t.Error("task process still alive")
			}
			if n := len(fake.Calls("StartTask")); n != 1 {
				t.Errorf("task started %d times", n)
			}
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  executor.Config
		want string
	}{
		{name: "no agent id", cfg: executor.Config{DataDir: shortDir(t)}, want: "agent id"},
		{name: "no data dir", cfg: executor.Config{AgentID: "a"}, want: "data dir"},
		{name: "orphan grace too long", cfg: executor.Config{AgentID: "a", DataDir: shortDir(t), OrphanGrace: 20 * time.Second}, want: "orphan grace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := executor.Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

func TestConfigLogValueHidesToken(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("config", "cfg", executor.Config{AgentID: "a1", Token: "s3cret-token"})
	if strings.Contains(buf.String(), "s3cret-token") || !strings.Contains(buf.String(), "a1") {
		t.Errorf("logged config: %s", buf.String())
	}
}
