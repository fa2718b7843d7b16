package services

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func status(s *Supervisor, id string) Status {
	for _, st := range s.Statuses() {
		if st.ID == id {
			return st
		}
	}
	return Status{}
}

func newSupervisor(t *testing.T) *Supervisor {
	s := New(Config{Dir: t.TempDir(), BaseEnv: []string{"PATH=" + os.Getenv("PATH")}, BackoffMin: 50 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond})
	t.Cleanup(s.Close)
	return s
}

func TestServiceIsRestartedRolledAndStopped(t *testing.T) {
	s := newSupervisor(t)
	d := Desired{ID: "hb", Version: "1", Command: "sleep", Args: []string{"60"}, RestartPolicy: "always", Running: true, Grace: time.Second}
	s.Reconcile([]Desired{d})
	waitFor(t, "running", func() bool { return status(s, "hb").State == StateRunning })
	first := status(s, "hb").PID
	// SIGKILLed, it comes back with restarts incremented.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart", func() bool { st := status(s, "hb"); return st.State == StateRunning && st.PID != first })
	if st := status(s, "hb"); st.Restarts != 1 || st.Error != "killed by SIGKILL" {
		t.Fatalf("after the kill: %+v", st)
	}
	second := status(s, "hb").PID
	// A new version replaces the process; that is not a restart.
	d.Version, d.Args = "2", []string{"61"}
	s.Reconcile([]Desired{d})
	waitFor(t, "the new version", func() bool { st := status(s, "hb"); return st.Version == "2" && st.State == StateRunning })
	if st := status(s, "hb"); st.PID == second || alive(second) || st.Restarts != 1 {
		t.Fatalf("after the roll: %+v (old pid alive %v)", st, alive(second))
	}
	third := status(s, "hb").PID
	d.Running = false
	s.Reconcile([]Desired{d})
	waitFor(t, "stopped", func() bool { return status(s, "hb").State == StateStopped })
	waitFor(t, "the process gone", func() bool { return !alive(third) })
	// No longer desired at all: forgotten.
	s.Reconcile(nil)
	if len(s.Statuses()) != 0 {
		t.Fatalf("statuses = %+v", s.Statuses())
	}
}

// A process killed by a signal names it as tasks do (docs/api/services.md#managedservice).
func TestKilledServiceNamesTheSignal(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want string
	}{{syscall.SIGKILL, "killed by SIGKILL"}, {syscall.SIGTERM, "killed by SIGTERM"}} {
		t.Run(tc.want, func(t *testing.T) {
			s := newSupervisor(t)
			s.Reconcile([]Desired{{ID: "svc", Version: "1", Command: "sleep", Args: []string{"60"}, RestartPolicy: "never", Running: true}})
			waitFor(t, "running", func() bool { return status(s, "svc").State == StateRunning })
			if err := syscall.Kill(status(s, "svc").PID, tc.sig); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "exited", func() bool { return status(s, "svc").State == StateExited })
			if st := status(s, "svc"); st.Error != tc.want {
				t.Fatalf("error = %q, want %q", st.Error, tc.want)
			}
		})
	}
}

func TestRestartPolicies(t *testing.T) {
	s := newSupervisor(t)
	s.Reconcile([]Desired{
		{ID: "never", Version: "1", Command: "sh", Args: []string{"-c", "exit 3"}, RestartPolicy: "never", Running: true},
		{ID: "ok", Version: "1", Command: "true", RestartPolicy: "on-failure", Running: true},
		{ID: "failing", Version: "1", Command: "sh", Args: []string{"-c", "exit 1"}, RestartPolicy: "on-failure", Running: true},
	})
	waitFor(t, "never exited", func() bool { st := status(s, "never"); return st.State == StateExited && st.Error == "exit code 3" })
	waitFor(t, "ok exited", func() bool { st := status(s, "ok"); return st.State == StateExited && st.Restarts == 0 })
	waitFor(t, "failing restarted twice", func() bool { return status(s, "failing").Restarts >= 2 })
}

func TestLogsRotate(t *testing.T) {
	dir := t.TempDir()
	l, err := openLog(filepath.Join(dir, "out.log"), 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"aaaaaaaa\n", "bbbbbbbb\n", "cccccccc\n", "dddddddd\n"} {
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for name, want := range map[string]string{"out.log": "dddddddd\n", "out.log.1": "cccccccc\n", "out.log.2": "bbbbbbbb\n"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", name, got, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out.log.3")); !os.IsNotExist(err) {
		t.Errorf("more old logs than kept: %v", err)
	}
}

func TestServiceOutputGoesToItsLog(t *testing.T) {
	s := newSupervisor(t)
	s.Reconcile([]Desired{{ID: "echo", Version: "1", Command: "sh", Args: []string{"-c", "echo hello $TASKMESH_SERVICE_VERSION"},
		RestartPolicy: "never", Running: true}})
	waitFor(t, "exited", func() bool { return status(s, "echo").State == StateExited })
	got, err := os.ReadFile(filepath.Join(s.cfg.Dir, "echo", "stdout.log"))
	if err != nil || !strings.Contains(string(got), "hello 1") {
		t.Fatalf("log = %q, %v", got, err)
	}
}

// A service's restart count outlives the agent: a new supervisor on the
// same directory (the agent restarted) counts on from it, and the agent's
// own restart is not counted. A service no longer desired loses its
// count.
func TestRestartCountOutlivesTheAgent(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, BaseEnv: []string{"PATH=" + os.Getenv("PATH")}, BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	d := Desired{ID: "hb", Version: "1", Command: "sleep", Args: []string{"60"}, RestartPolicy: "always", Running: true, Grace: time.Second}
	killOnce := func(s *Supervisor) {
		t.Helper()
		waitFor(t, "running", func() bool { return status(s, "hb").State == StateRunning })
		pid := status(s, "hb").PID
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a restart", func() bool { st := status(s, "hb"); return st.State == StateRunning && st.PID != pid })
	}

	first := New(cfg)
	first.Reconcile([]Desired{d})
	killOnce(first)
	killOnce(first)
	first.Close()

	second := New(cfg)
	second.Reconcile([]Desired{d})
	waitFor(t, "running again", func() bool { return status(second, "hb").State == StateRunning })
	if st := status(second, "hb"); st.Restarts != 2 {
		t.Fatalf("after the agent's restart: restarts %d, want the 2 of before", st.Restarts)
	}
	killOnce(second)
	if st := status(second, "hb"); st.Restarts != 3 {
		t.Fatalf("restarts %d, want 3", st.Restarts)
	}
	// No longer desired: the count goes with it.
	second.Reconcile(nil)
	second.Close()
	third := New(cfg)
	t.Cleanup(third.Close)
	third.Reconcile([]Desired{d})
	waitFor(t, "running anew", func() bool { return status(third, "hb").State == StateRunning })
	if st := status(third, "hb"); st.Restarts != 0 {
		t.Fatalf("a service declared anew starts at restarts %d, want 0", st.Restarts)
	}
}
