package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hostGone reports whether the host process pid has exited (and was
// reaped by the goroutine that started it).
func hostGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// One host serves tasks started at the same time, each with its own pid,
// outcome and output, and reaps what they leave behind.
func TestHostServesManyTasksAtOnce(t *testing.T) {
	h := testHost(t)
	const n = 8
	runs := make([]*run, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Odd tasks leave a background process in their group, which the
			// host kills and reaps at their end.
			script := fmt.Sprintf("echo task-%d; exit %d", i, i)
			if i%2 == 1 {
				script = "sleep 30 & " + script
			}
			runs[i], errs[i] = launchHosted(t, h, []string{"sh", "-c", script}, nil)
		}()
	}
	wg.Wait()
	pids := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("task %d: %v", i, errs[i])
		}
		r := runs[i]
		if r.started.ShimPID != runs[0].started.ShimPID {
			t.Fatalf("task %d served by %d, task 0 by %d: want one host", i, r.started.ShimPID, runs[0].started.ShimPID)
		}
		if pids[r.started.PID] {
			t.Fatalf("task %d has the pid %d of another task", i, r.started.PID)
		}
		pids[r.started.PID] = true
	}
	for i, r := range runs {
		st := r.wait(t, 15*time.Second)
		if st.ExitCode != i || st.PID != r.started.PID || st.Stop != "" {
			t.Errorf("task %d: status %+v, want exit %d of pid %d", i, st, i, r.started.PID)
		}
		out, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
		if want := fmt.Sprintf("task-%d\n", i); string(out) != want {
			t.Errorf("task %d: stdout %q, want %q", i, out, want)
		}
		if !groupGone(r.started.PID) {
			t.Errorf("task %d: its group still has members", i)
		}
	}
}

// The agent letting its host go (it stopped, or died) does not stop the
// tasks: a new agent attaches to them, and the host leaves once the last
// one has been read.
func TestHostOutlivesItsAgentThenLeaves(t *testing.T) {
	h := testHost(t)
	r, err := launchHosted(t, h, []string{"sh", "-c", "sleep 0.5; exit 5"}, func(s *Spec) { s.OrphanGrace = 5 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	host := r.started.ShimPID
	r.sess.Close()
	h.Close()
	time.Sleep(100 * time.Millisecond)
	if hostGone(host) {
		t.Fatal("the host left while it still served a task")
	}
	sess, err := Attach(SocketPath(r.dir))
	if err != nil {
		t.Fatal(err)
	}
	r.sess = sess
	if st := r.wait(t, 10*time.Second); st.ExitCode != 5 || st.Stop != "" {
		t.Fatalf("status = %+v, want exit 5", st)
	}
	sess.Close()
	waitFor(t, func() bool { return hostGone(host) })
}

// A host that died is replaced by the next start; the tasks it served are
// lost with it only if they were started traced.
func TestHostIsStartedAgainWhenItDies(t *testing.T) {
	h := testHost(t)
	var launched []int
	h.Launched = func(pid int, _ string) { launched = append(launched, pid) }
	first, err := launchHosted(t, h, []string{"sleep", "300"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first.started.ShimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-first.started.PID, syscall.SIGKILL) })
	// The session sees the host go; the next start needs another host.
	<-first.sess.Done()
	second, err := launchHosted(t, h, []string{"sh", "-c", "exit 9"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.started.ShimPID == first.started.ShimPID {
		t.Fatalf("second task served by the dead host %d", first.started.ShimPID)
	}
	if st := second.wait(t, 10*time.Second); st.ExitCode != 9 {
		t.Fatalf("status = %+v, want exit 9", st)
	}
	if len(launched) != 2 || launched[0] != first.started.ShimPID || launched[1] != second.started.ShimPID {
		t.Fatalf("hosts launched %v, want %d then %d", launched, first.started.ShimPID, second.started.ShimPID)
	}
}

// SIGTERM to a host stops every task it serves, as it stops the task of a
// shim of its own, and the host leaves once they have ended.
func TestHostStopsItsTasksAtSIGTERM(t *testing.T) {
	h := testHost(t)
	var runs []*run
	for range 2 {
		r, err := launchHosted(t, h, []string{"sleep", "300"}, func(s *Spec) { s.Grace = time.Second })
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	host := runs[0].started.ShimPID
	if err := syscall.Kill(host, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		if st := r.wait(t, 10*time.Second); st.Stop != StopTerminated || st.SignalName != "SIGTERM" {
			t.Errorf("task %d: status %+v, want stopped by the host's SIGTERM", i, st)
		}
		r.sess.Close()
	}
	waitFor(t, func() bool { return hostGone(host) })
}

// A run directory already served is refused, through a host as by a shim
// of its own, and the served task goes on untouched.
func TestHostRefusesARunDirAlreadyServed(t *testing.T) {
	h := testHost(t)
	r, err := launchHosted(t, h, []string{"sh", "-c", "sleep 0.5; echo once"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Start(context.Background(), r.dir, spec); !IsAlreadyServed(err) {
		t.Fatalf("second start: %v, want the already-served start error", err)
	}
	if st := r.wait(t, 10*time.Second); st.ExitCode != 0 || st.Stop != "" {
		t.Fatalf("status = %+v, want a clean exit", st)
	}
	if out, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile)); string(out) != "once\n" {
		t.Fatalf("stdout = %q, want one run", out)
	}
}

// Bad requests on the control socket are answered with an error on their
// line; nothing is started and the host goes on serving.
func TestHostAnswersBadRequests(t *testing.T) {
	h := testHost(t)
	if _, err := launchHosted(t, h, []string{"true"}, nil); err != nil {
		t.Fatal(err)
	}
	socket, _, err := h.current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	lines := bufio.NewReader(c)
	missing := filepath.Join(shortDir(t), "missing")
	for _, tc := range []struct{ req, want string }{
		{"not json", "bad request"},
		{`{"op":"wait"}`, `unknown op "wait"`},
		{`{"op":"serve","run_dir":"runs/a1"}`, "not an absolute path"},
		{`{"op":"serve"}`, "not an absolute path"},
		{`{"op":"serve","run_dir":"` + missing + `"}`, "no such file or directory"},
	} {
		if _, err := c.Write([]byte(tc.req + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatalf("%s: %v", tc.req, err)
		}
		var r ready
		if err := json.Unmarshal(line, &r); err != nil || r.PID != 0 || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: answer %s, want an error with %q", tc.req, line, tc.want)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a request for a missing run directory made it: %v", err)
	}
	r, err := launchHosted(t, h, []string{"sh", "-c", "exit 4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := r.wait(t, 10*time.Second); st.ExitCode != 4 {
		t.Fatalf("status after bad requests = %+v, want exit 4", st)
	}
}

// A host command that never becomes ready fails the start within the
// caller's context, and leaves nothing served.
func TestHostThatNeverStartsFailsTheStart(t *testing.T) {
	h := NewHost([]string{"/bin/sh", "-c", "exec sleep 20", "stuck-host"}, baseEnv(), shortDir(t))
	t.Cleanup(h.Close)
	dir := shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := h.Start(ctx, dir, Spec{TaskID: "t1", AttemptID: "a1", Argv: []string{"true"}, Env: baseEnv(), Dir: dir, Socket: SocketPath(dir)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if st, err := Inspect(dir); err != nil || st.ShimAlive || st.MayHaveRun {
		t.Fatalf("run directory = %+v (%v), want nothing served", st, err)
	}
}

// A failed serve request is sent to another host only when it certainly
// started nothing.
func TestNothingServedAfterAFailedRequest(t *testing.T) {
	fresh := shortDir(t)
	spawned := shortDir(t)
	if err := markSpawned(spawned); err != nil {
		t.Fatal(err)
	}
	finished := shortDir(t)
	if err := writeStatus(finished, Status{ExitCode: 0}); err != nil {
		t.Fatal(err)
	}
	broken := errors.New("shim host did not answer: EOF")
	for _, tc := range []struct {
		name   string
		err    error
		runDir string
		want   bool
	}{
		{"never reached a host", fmt.Errorf("%w: connection refused", errHostGone), spawned, true},
		{"timed out", fmt.Errorf("shim host did not answer: %w", os.ErrDeadlineExceeded), fresh, false},
		{"broken, nothing in the run directory", broken, fresh, true},
		{"broken after the spawn marker", broken, spawned, false},
		{"broken after the status", broken, finished, false},
	} {
		if got := nothingServed(tc.err, tc.runDir); got != tc.want {
			t.Errorf("%s: nothingServed = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A run directory whose lock is held (a host serving it) is not retried.
	lock, err := lockRunDir(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if nothingServed(broken, fresh) {
		t.Error("locked run directory: nothingServed = true, want false")
	}
}

// Each host gets a socket of its own, in the host directory or, when that
// path is too long for a unix socket, in the temporary directory.
func TestHostSocketPath(t *testing.T) {
	short := shortDir(t)
	long := filepath.Join(short, strings.Repeat("d", 120))
	for _, dir := range []string{short, long} {
		a, err := hostSocketPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hostSocketPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		if a == b || len(a) >= 100 || !strings.HasSuffix(a, ".sock") {
			t.Errorf("%d-byte dir: sockets %q and %q, want two distinct paths under 100 bytes", len(dir), a, b)
		}
		if want := dir; len(filepath.Join(dir, "host-0123456789abcdef.sock")) >= 100 {
			want = os.TempDir()
			if filepath.Dir(a) != want {
				t.Errorf("long dir: socket %q, want it in %s", a, want)
			}
		} else if filepath.Dir(a) != want {
			t.Errorf("short dir: socket %q, want it in %s", a, want)
		}
	}
}

// A host about to start moves a log past its bound aside: the hosts of a
// long-lived agent keep two files near HostLogMaxBytes, not one that grows.
func TestHostLogIsRotatedPastItsBound(t *testing.T) {
	h := testHost(t)
	logPath := filepath.Join(h.dir, HostLogFile)
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(logPath, HostLogMaxBytes+1); err != nil {
		t.Fatal(err)
	}
	r, err := launchHosted(t, h, []string{"true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.wait(t, 10*time.Second)
	old, err := os.Stat(logPath + ".1")
	if err != nil || old.Size() != HostLogMaxBytes+1 {
		t.Fatalf("rotated log: %v, %v; want the old file of %d bytes", old, err, HostLogMaxBytes+1)
	}
	if cur, err := os.Stat(logPath); err != nil || cur.Size() > HostLogMaxBytes {
		t.Fatalf("current log: %v, %v; want a new file", cur, err)
	}
	// Under the bound, the file stays where it is.
	rotateLog(logPath, HostLogMaxBytes)
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("a log under the bound was moved: %v", err)
	}
}
