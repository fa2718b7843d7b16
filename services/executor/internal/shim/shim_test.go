package shim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// TestMain lets the test binary act as the shim: the agent re-executes its
// own binary as `<exe> executor shim ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim" {
		os.Exit(Main(os.Args[3:]))
	}
	os.Exit(m.Run())
}

func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tmsh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func baseEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
}

type run struct {
	dir     string
	started Started
	sess    *Session
}

// launcher starts a task in a new run directory: launch, or launchHosted
// with a host of the test's own.
type launcher func(t *testing.T, argv []string, mod func(*Spec)) (*run, error)

// forEachShim runs test with a shim of the task's own and with a shim
// host: a task is served alike by both.
func forEachShim(t *testing.T, test func(t *testing.T, launch launcher)) {
	t.Run("own", func(t *testing.T) { test(t, launch) })
	t.Run("host", func(t *testing.T) {
		h := testHost(t)
		test(t, func(t *testing.T, argv []string, mod func(*Spec)) (*run, error) {
			return launchHosted(t, h, argv, mod)
		})
	})
}

// testCgroups is the test's cgroup hierarchy, released when the test
// ends; making cgroups needs root.
func testCgroups(t *testing.T) *cgroup.Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	h, err := cgroup.Detect(cgroup.Host{}, "taskmesh-shim-test")
	if err != nil {
		t.Fatalf("running as root but no usable cgroups: %v", err)
	}
	t.Cleanup(h.Release)
	return h
}

// testHost is a host client whose host goes when the test ends.
func testHost(t *testing.T) *Host {
	t.Helper()
	h := NewHost([]string{os.Args[0], "executor", "shim"}, baseEnv(), shortDir(t))
	t.Cleanup(h.Close)
	return h
}

func launch(t *testing.T, argv []string, mod func(*Spec)) (*run, error) {
	t.Helper()
	return launchVia(t, argv, mod, func(dir string, spec Spec) (Started, error) {
		return Start(context.Background(), Launch{
			Command: []string{os.Args[0], "executor", "shim"}, Env: baseEnv(), RunDir: dir, Spec: spec,
		})
	})
}

// launchHosted starts the task through the host of h.
func launchHosted(t *testing.T, h *Host, argv []string, mod func(*Spec)) (*run, error) {
	t.Helper()
	return launchVia(t, argv, mod, func(dir string, spec Spec) (Started, error) {
		return h.Start(context.Background(), dir, spec)
	})
}

func launchVia(t *testing.T, argv []string, mod func(*Spec), start func(dir string, spec Spec) (Started, error)) (*run, error) {
	t.Helper()
	dir := shortDir(t)
	spec := Spec{
		TaskID: "t1", AttemptID: "a1", Argv: argv, Env: baseEnv(), Dir: dir,
		Grace: 2 * time.Second, OrphanGrace: 10 * time.Second,
		OutputLimit: 1 << 20, TailBytes: 1024,
		ProgressFile: filepath.Join(dir, "progress"), Socket: SocketPath(dir),
		SelfArgv: []string{os.Args[0], "executor", "shim"},
	}
	if mod != nil {
		mod(&spec)
	}
	st, err := start(dir, spec)
	r := &run{dir: dir, started: st}
	if err != nil {
		return r, err
	}
	r.sess, err = Attach(spec.Socket)
	if errors.Is(err, ErrGone) {
		// A task that ends at once can take its shim with it before the
		// test attaches: no session, and wait reads status.json, as the
		// agent does (ErrGone's contract).
		return r, nil
	}
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(r.sess.Close)
	return r, nil
}

func (r *run) wait(t *testing.T, limit time.Duration) Status {
	t.Helper()
	if r.sess == nil {
		st, ok, err := ReadStatus(r.dir)
		if err != nil || !ok {
			t.Fatalf("the shim left before the test attached, and no status.json (%v)", err)
		}
		return st
	}
	select {
	case <-r.sess.Done():
	case <-time.After(limit):
		t.Fatalf("task did not end within %s", limit)
	}
	st, err := r.sess.Result()
	if err == nil {
		return st
	}
	// A task that ends at once can finish before the shim accepted the
	// wait connection; the shim then leaves without answering, and the
	// agent reads status.json instead (Session.Result's contract).
	disk, ok, rerr := ReadStatus(r.dir)
	if rerr != nil || !ok {
		t.Fatalf("result: %v, and no status.json (%v)", err, rerr)
	}
	return disk
}

func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func TestShimExitAndOutput(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		tests := []struct {
			name        string
			argv        []string
			limit       int64
			wantCode    int
			wantSignal  string
			wantStdout  string
			wantDropped int64
			wantTail    string
		}{
			// A tail file only when the limit cut the stream.
			{name: "ok", argv: []string{"sh", "-c", "echo hello; echo err >&2"}, limit: 1 << 20, wantStdout: "hello\n"},
			{name: "exit code", argv: []string{"sh", "-c", "exit 7"}, limit: 1 << 20, wantCode: 7},
			{name: "signal", argv: []string{"sh", "-c", "kill -KILL $$"}, limit: 1 << 20, wantCode: 137, wantSignal: "SIGKILL"},
			{name: "cap", argv: []string{"sh", "-c", "printf 0123456789abcdef"}, limit: 10, wantStdout: "0123456789", wantDropped: 6, wantTail: "0123456789abcdef"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r, err := launch(t, tc.argv, func(s *Spec) { s.OutputLimit = tc.limit })
				if err != nil {
					t.Fatal(err)
				}
				st := r.wait(t, 10*time.Second)
				if st.ExitCode != tc.wantCode || st.SignalName != tc.wantSignal {
					t.Fatalf("exit = %d %q, want %d %q", st.ExitCode, st.SignalName, tc.wantCode, tc.wantSignal)
				}
				out, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
				if string(out) != tc.wantStdout {
					t.Errorf("stdout = %q, want %q", out, tc.wantStdout)
				}
				if st.StdoutDropped != tc.wantDropped {
					t.Errorf("dropped = %d, want %d", st.StdoutDropped, tc.wantDropped)
				}
				tail, err := os.ReadFile(filepath.Join(r.dir, StdoutTail))
				if string(tail) != tc.wantTail || (tc.wantTail == "") != errors.Is(err, os.ErrNotExist) {
					t.Errorf("tail = %q (%v), want %q", tail, err, tc.wantTail)
				}
				if _, err := os.Stat(filepath.Join(r.dir, StderrTail)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a stderr tail of an uncut stream: %v", err)
				}
				disk, ok, err := ReadStatus(r.dir)
				if err != nil || !ok || disk.ExitCode != st.ExitCode || disk.PID != r.started.PID {
					t.Errorf("status.json = %+v ok=%v err=%v", disk, ok, err)
				}
			})
		}
	})
}

func TestShimStartError(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"no-such-command-xyz"}, nil)
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, "not found") {
			t.Fatalf("err = %v, want StartError not found", err)
		}
		st, ok, _ := ReadStatus(r.dir)
		if !ok || st.ExitCode != -1 || st.StartError == "" {
			t.Fatalf("status = %+v ok=%v", st, ok)
		}
	})
}

func TestShimStopGraceThenKill(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		// The task traps SIGTERM and keeps running: only SIGKILL after the grace
		// period ends it.
		r, err := launch(t, []string{"sh", "-c", `trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done`}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			b, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
			return strings.Contains(string(b), "ready")
		})
		begin := time.Now()
		if _, err := r.sess.Stop(context.Background(), "cancelled", 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		st := r.wait(t, 10*time.Second)
		if took := time.Since(begin); took < 450*time.Millisecond {
			t.Errorf("ended after %s, before the grace period", took)
		}
		killedAfterTerm(t, r, st, "cancelled")
	})
}

// A stop with grace 0 kills right after SIGTERM, whatever the spec's
// grace: 0 is no grace, not "the spec's".
func TestShimStopZeroGraceKillsAtOnce(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"sh", "-c", `trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done`},
			func(s *Spec) { s.Grace = 30 * time.Second })
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			b, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
			return strings.Contains(string(b), "ready")
		})
		begin := time.Now()
		if _, err := r.sess.Stop(context.Background(), "cancelled", 0); err != nil {
			t.Fatal(err)
		}
		st := r.wait(t, 20*time.Second)
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("ended %s after a stop with no grace", took)
		}
		if st.Stop != "cancelled" || st.SignalName != "SIGKILL" {
			t.Errorf("status = %+v, want stop cancelled by SIGKILL", st)
		}
		if !groupGone(r.started.PID) {
			t.Error("process group still has members")
		}
	})
}

func TestShimTimeoutKillsTree(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"sh", "-c", `sleep 300 & sleep 300 & sh -c 'sleep 300 & sleep 300' & wait`},
			func(s *Spec) { s.Timeout = 300 * time.Millisecond; s.Grace = time.Second })
		if err != nil {
			t.Fatal(err)
		}
		st := r.wait(t, 10*time.Second)
		if st.Stop != StopTimeout {
			t.Fatalf("stop = %q, want timeout", st.Stop)
		}
		if !groupGone(r.started.PID) {
			t.Fatal("process group still has members after timeout")
		}
	})
}

func TestShimOrphaned(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"sleep", "300"}, func(s *Spec) { s.OrphanGrace = 300 * time.Millisecond })
		if err != nil {
			t.Fatal(err)
		}
		r.sess.Close()
		waitFor(t, func() bool { _, ok, _ := ReadStatus(r.dir); return ok })
		st, _, _ := ReadStatus(r.dir)
		if st.Stop != StopOrphaned || st.SignalName != "SIGTERM" {
			t.Fatalf("status = %+v, want orphaned by SIGTERM", st)
		}
	})
}

// An orphan grace of 0 never orphans the task: it runs to its end with
// no agent attached, and its status is there for the next agent.
func TestShimWithoutOrphanGraceKeepsTheTask(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"sh", "-c", "sleep 0.5; exit 4"}, func(s *Spec) { s.OrphanGrace = 0 })
		if err != nil {
			t.Fatal(err)
		}
		r.sess.Close()
		waitFor(t, func() bool { _, ok, _ := ReadStatus(r.dir); return ok })
		if st, _, _ := ReadStatus(r.dir); st.ExitCode != 4 || st.Stop != "" {
			t.Fatalf("status = %+v, want exit 4, not stopped", st)
		}
	})
}

func TestShimReattach(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"sh", "-c", "sleep 0.5; exit 3"}, func(s *Spec) { s.OrphanGrace = 5 * time.Second })
		if err != nil {
			t.Fatal(err)
		}
		r.sess.Close()
		time.Sleep(100 * time.Millisecond)
		sess, err := Attach(SocketPath(r.dir))
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		r.sess = sess
		if st := r.wait(t, 10*time.Second); st.ExitCode != 3 || st.Stop != "" {
			t.Fatalf("status = %+v, want exit 3", st)
		}
	})
}

func TestShimProgress(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		tests := []struct {
			name    string
			script  string
			wantVal int
			wantMsg string
		}{
			{name: "stdout", script: `echo '::progress::40 loading'; sleep 1`, wantVal: 40, wantMsg: "loading"},
			{name: "file", script: `echo 10 a >> "$TASKMESH_PROGRESS_FILE"; echo '75 almost' >> "$TASKMESH_PROGRESS_FILE"; sleep 1`, wantVal: 75, wantMsg: "almost"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r, err := launch(t, []string{"sh", "-c", tc.script}, func(s *Spec) {
					s.Env = append(s.Env, "TASKMESH_PROGRESS_FILE="+s.ProgressFile)
				})
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool {
					st, err := r.sess.State(context.Background())
					return err == nil && st.Progress.Value == tc.wantVal && st.Progress.Message == tc.wantMsg
				})
				if st := r.wait(t, 10*time.Second); st.Progress != tc.wantVal {
					t.Errorf("final progress = %d, want %d", st.Progress, tc.wantVal)
				}
			})
		}
	})
}

func TestShimLimits(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		python, err := exec.LookPath("python3")
		if err != nil {
			t.Fatalf("python3 is needed for the memory limit test: %v", err)
		}
		tests := []struct {
			name     string
			argv     []string
			mod      func(*Spec)
			wantCode int
		}{
			{name: "memory", argv: []string{python, "-c", "b = bytearray(1 << 30)"},
				mod: func(s *Spec) { s.MemoryLimitBytes = 256 << 20 }, wantCode: 1},
			{name: "memory unlimited", argv: []string{python, "-c", "b = bytearray(1 << 30)"}, wantCode: 0},
			{name: "cpu", argv: []string{"sh", "-c", "while :; do :; done"},
				mod: func(s *Spec) { s.CPULimitSeconds = 1 }, wantCode: 128 + int(syscall.SIGXCPU)},
		}
		// Each limit holds both ways: through the `shim exec` wrapper, and
		// traced with no wrapper to fall back to, so the traced start alone
		// set it.
		starts := []struct {
			name string
			mod  func(*Spec)
		}{
			{"wrapper", func(*Spec) {}},
			{"traced", func(s *Spec) { s.TracedStart, s.SelfArgv = true, []string{"/nonexistent/taskmesh-shim"} }},
		}
		for _, start := range starts {
			for _, tc := range tests {
				t.Run(start.name+"/"+tc.name, func(t *testing.T) {
					r, err := launch(t, tc.argv, func(s *Spec) {
						if tc.mod != nil {
							tc.mod(s)
						}
						start.mod(s)
					})
					if err != nil {
						t.Fatal(err)
					}
					st := r.wait(t, 30*time.Second)
					if st.ExitCode != tc.wantCode {
						errb, _ := os.ReadFile(filepath.Join(r.dir, StderrFile))
						t.Fatalf("exit = %d, want %d (stderr %q)", st.ExitCode, tc.wantCode, errb)
					}
				})
			}
		}
	})
}

// tracedOnly makes a spec that can only start traced: limited, and with
// no wrapper to fall back to.
func tracedOnly(s *Spec) {
	s.TracedStart, s.SelfArgv = true, []string{"/nonexistent/taskmesh-shim"}
	if s.CPULimitSeconds == 0 {
		s.CPULimitSeconds = 3600
	}
}

func TestProbeTracedStart(t *testing.T) {
	if err := ProbeTracedStart(os.Args[0]); err != nil {
		t.Fatalf("probe: %v (this host permits ptrace; the tests rely on it)", err)
	}
	if err := ProbeTracedStart("/nonexistent/taskmesh-shim"); err == nil {
		t.Fatal("probing a missing binary succeeded")
	}
}

// A task started traced is in its cgroup from its first instruction: what
// it reads of its own cgroups is the task's group on every controller.
func TestTracedStartPutsTheTaskInItsCgroupFirst(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		h := testCgroups(t)
		g, err := h.Create("traced-a1", cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cgroup.Remove(g.Dirs) }()
		r, err := launch(t, []string{"cat", "/proc/self/cgroup"}, func(s *Spec) {
			s.Cgroup = g
			tracedOnly(s)
		})
		if err != nil {
			t.Fatal(err)
		}
		if st := r.wait(t, 10*time.Second); st.ExitCode != 0 {
			t.Fatalf("exit = %d", st.ExitCode)
		}
		out, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
		for _, dir := range g.Dirs {
			// v1: "<id>:memory:/…/traced-a1"; v2: "0::/…/traced-a1".
			want := strings.TrimPrefix(dir, filepath.Dir(filepath.Dir(dir)))
			if !strings.Contains(string(out), want) {
				t.Errorf("the task's cgroups %q lack %s", out, want)
			}
		}
	})
}

// A traced task whose set-up fails never runs: the start fails with the
// reason, and no process is left.
func TestTracedStartThatCannotSetUpLeavesNoProcess(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		marker := "4242.25" // sleep's argument, to find it in /proc
		r, err := launch(t, []string{"sleep", marker}, func(s *Spec) {
			s.Cgroup = &cgroup.Group{Version: 1, Dirs: []string{filepath.Join(t.TempDir(), "no-such-cgroup")}}
			tracedOnly(s)
		})
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, "no-such-cgroup") {
			t.Fatalf("err = %v, want a start error naming the cgroup", err)
		}
		if st, ok, _ := ReadStatus(r.dir); !ok || st.ExitCode != -1 {
			t.Fatalf("status = %+v ok=%v, want a task that never ran", st, ok)
		}
		if pids := processesWithArg(t, marker); len(pids) > 0 {
			t.Fatalf("processes %v still run the task", pids)
		}
	})
}

// A task started traced does not outlive its shim.
func TestTracedTaskDiesWithItsShim(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		r, err := launch(t, []string{"sleep", "1000"}, tracedOnly)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(r.started.ShimPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !errors.Is(syscall.Kill(r.started.PID, 0), syscall.ESRCH) {
			if time.Now().After(deadline) {
				t.Fatalf("task %d outlived its shim %d", r.started.PID, r.started.ShimPID)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// Where ptrace is refused, a task that has a wrapper starts through it,
// and one without a wrapper fails with the refusal; a traced start's
// other errors are never retried through the wrapper.
func TestRefusedTracedStartFallsBackToTheWrapper(t *testing.T) {
	refused := func(string, []string, *syscall.ProcAttr, func(int) error) (int, error) {
		return 0, errTraceDenied
	}
	broken := errors.New("the set-up failed")
	failing := func(string, []string, *syscall.ProcAttr, func(int) error) (int, error) { return 0, broken }
	task := taskStart{path: "/bin/sh", argv: []string{"sh", "-c", "exit 4"}, traced: true}
	wrapped := task
	wrapped.wrapperPath, wrapped.wrapperArgv = "/bin/sh", []string{"sh", "-c", "exit 7"}
	exitOf := func(pid int) int {
		t.Helper()
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatal(err)
		}
		return ws.ExitStatus()
	}

	pid, err := wrapped.fork(&syscall.ProcAttr{}, refused)
	if err != nil {
		t.Fatal(err)
	}
	if code := exitOf(pid); code != 7 {
		t.Fatalf("refused with a wrapper: exit %d, want the wrapper's 7", code)
	}
	if _, err := task.fork(&syscall.ProcAttr{}, refused); !errors.Is(err, errTraceDenied) {
		t.Fatalf("refused without a wrapper: err %v, want the refusal", err)
	}
	if _, err := wrapped.fork(&syscall.ProcAttr{}, failing); !errors.Is(err, broken) {
		t.Fatalf("a failed traced start: err %v, want it as it is", err)
	}
	untraced := wrapped
	untraced.traced = false
	pid, err = untraced.fork(&syscall.ProcAttr{}, failing)
	if err != nil {
		t.Fatal(err)
	}
	if code := exitOf(pid); code != 7 {
		t.Fatalf("not traced, with a wrapper: exit %d, want the wrapper's 7", code)
	}
}

// processesWithArg lists the pids whose command line has arg.
func processesWithArg(t *testing.T, arg string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

func TestParseProgress(t *testing.T) {
	tests := []struct {
		in      string
		wantV   int
		wantMsg string
		wantOK  bool
	}{
		{"50", 50, "", true},
		{" 12.7 step 3 of 9 ", 12, "step 3 of 9", true},
		{"100%", 100, "", true},
		{"101", 0, "", false},
		{"-1", 0, "", false},
		{"abc", 0, "", false},
		{"", 0, "", false},
	}
	for _, tc := range tests {
		v, msg, ok := ParseProgress(tc.in)
		if v != tc.wantV || msg != tc.wantMsg || ok != tc.wantOK {
			t.Errorf("ParseProgress(%q) = %d %q %v, want %d %q %v", tc.in, v, msg, ok, tc.wantV, tc.wantMsg, tc.wantOK)
		}
	}
}

func TestSocketPathLength(t *testing.T) {
	short := SocketPath("/tmp/x")
	long := SocketPath("/" + strings.Repeat("d", 120))
	if short != "/tmp/x/shim.sock" || len(long) >= 108 || long != SocketPath("/"+strings.Repeat("d", 120)) {
		t.Fatalf("SocketPath: %q %q", short, long)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A task that cannot start leaves no cgroup behind: the agent made the
// group for the shim to remove, whether the task ran or not, on either
// start path.
func TestStartThatFailsRemovesTheCgroup(t *testing.T) {
	forEachShim(t, func(t *testing.T, launch launcher) {
		h := testCgroups(t)
		for _, c := range []struct {
			name   string
			traced bool
		}{{"traced", true}, {"wrapper", false}} {
			t.Run(c.name, func(t *testing.T) {
				g, err := h.Create("unstartable-"+c.name, cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64})
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = cgroup.Remove(g.Dirs) }()
				r, err := launch(t, []string{"no-such-command-xyz"}, func(s *Spec) {
					s.Cgroup = g
					if c.traced {
						tracedOnly(s)
					} else {
						s.CPULimitSeconds = 3600 // a limit: the wrapper's path
					}
				})
				var se *StartError
				switch {
				case errors.As(err, &se):
				case err == nil:
					// The wrapper started and its exec failed: the task ran
					// and ended, and the shim's end removes the group.
					if st := r.wait(t, 10*time.Second); st.ExitCode == 0 {
						t.Fatalf("a command that does not exist exited 0: %+v", st)
					}
				default:
					t.Fatalf("start: %v", err)
				}
				deadline := time.Now().Add(5 * time.Second)
				for _, dir := range g.Dirs {
					for {
						_, err := os.Stat(dir)
						if errors.Is(err, os.ErrNotExist) {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("the cgroup %s is still there after the failed start (%v)", dir, err)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
		}
	})
}
