package timerslack

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		env     string
		want    time.Duration
		ok      bool
		wantErr string
	}{
		{env: "", want: Default, ok: true},
		{env: "off", ok: false},
		{env: " 500us ", want: 500 * time.Microsecond, ok: true},
		{env: "2ms", want: 2 * time.Millisecond, ok: true},
		{env: "100ms", want: Max, ok: true},
		{env: "fast", wantErr: "not a duration"},
		{env: "0", wantErr: "out of range"},
		{env: "-1ms", wantErr: "out of range"},
		{env: "1s", wantErr: "out of range"},
	} {
		got, ok, err := Choose(tc.env)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), EnvVar) {
				t.Errorf("Choose(%q) error %v, want one naming %s and saying %q", tc.env, err, EnvVar, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || ok != tc.ok {
			t.Errorf("Choose(%q) = %s, %v, %v; want %s, %v", tc.env, got, ok, err, tc.want, tc.ok)
		}
	}
}

// helperEnv marks the test binary started by runHelper: TestHelperProcess
// then acts as a server process's main.
const helperEnv = "TIMERSLACK_HELPER_STARTS"

// TestHelperProcess is the process runHelper starts. Each start of its
// image appends its pid to the file named by helperEnv; then it calls
// Ensure, makes the runtime start more threads, and prints every
// thread's slack.
func TestHelperProcess(t *testing.T) {
	starts := os.Getenv(helperEnv)
	if starts == "" {
		return
	}
	f, err := os.OpenFile(starts, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		os.Exit(3)
	}
	_, _ = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	f.Close()
	if err := Ensure(); err != nil {
		os.Stdout.WriteString("ensure: " + err.Error() + "\n")
	}
	// Threads made after the start: each locked goroutine holds one.
	// (A thread's slack is in /proc/<tid>, not in its task directory.)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			wg.Done()
			<-release
		}()
	}
	wg.Wait()
	// Two children read their own slack: one started through StartChild,
	// one plainly; and whether the environment still passes the
	// inherited value on.
	for _, c := range []struct {
		name  string
		start func(func() error) error
	}{{"child", StartChild}, {"plain", func(f func() error) error { return f() }}} {
		cmd := exec.Command("cat", "/proc/self/timerslack_ns")
		var out strings.Builder
		cmd.Stdout = &out
		if err := c.start(cmd.Start); err != nil {
			os.Exit(5)
		}
		if err := cmd.Wait(); err != nil {
			os.Exit(6)
		}
		os.Stdout.WriteString(c.name + " " + strings.TrimSpace(out.String()) + "\n")
	}
	if out, err := CombinedOutput(exec.Command("cat", "/proc/self/timerslack_ns")); err == nil {
		os.Stdout.WriteString("combined " + strings.TrimSpace(string(out)) + "\n")
	}
	if v, ok := os.LookupEnv(inheritedEnv); ok {
		os.Stdout.WriteString("environment passes on " + v + "\n")
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	os.Stdout.WriteString("comm " + strings.TrimSpace(string(comm)) + "\n")
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", task.Name(), "timerslack_ns"))
		if err != nil {
			os.Exit(4)
		}
		os.Stdout.WriteString("slack " + strings.TrimSpace(string(b)) + "\n")
	}
	close(release)
	os.Exit(0)
}

// helperRun is what a run of TestHelperProcess printed.
type helperRun struct {
	pids   []string       // of each image started
	slacks map[string]int // threads per slack, in ns
	// child and plain are the slacks of its children started through
	// StartChild and plainly.
	child, plain string
	combined     string   // of the child run through CombinedOutput
	other        []string // any other line
}

// runHelper starts TestHelperProcess with TASKMESH_TIMER_SLACK set to env
// from a thread whose slack is inherited (the test's own), and returns
// what it printed.
func runHelper(t *testing.T, env string) (r helperRun, inherited string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("timer slack is a Linux setting")
	}
	starts := filepath.Join(t.TempDir(), "starts")
	if err := os.WriteFile(starts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+starts, EnvVar+"="+env)
	var out strings.Builder
	cmd.Stdout = &out
	// The helper copies the slack of the thread that starts it.
	runtime.LockOSThread()
	cur, err := Current()
	if err == nil {
		err = cmd.Start()
	}
	runtime.UnlockOSThread()
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out.String())
	}
	inherited = strconv.FormatInt(cur.Nanoseconds(), 10)
	r.slacks = map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if v, ok := strings.CutPrefix(line, "slack "); ok {
			r.slacks[v]++
		} else if v, ok := strings.CutPrefix(line, "child "); ok {
			r.child = v
		} else if v, ok := strings.CutPrefix(line, "plain "); ok {
			r.plain = v
		} else if v, ok := strings.CutPrefix(line, "combined "); ok {
			r.combined = v
		} else if v, ok := strings.CutPrefix(line, "comm "); ok {
			// The kernel names a process after the file it executes,
			// cut to 15 bytes: executing again must keep the name.
			if want := filepath.Base(os.Args[0]); v != want[:min(len(want), 15)] {
				t.Errorf("the helper is named %q, want %q", v, want)
			}
		} else if line != "" {
			r.other = append(r.other, line)
		}
	}
	b, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	r.pids = strings.Fields(string(b))
	return r, inherited
}

func TestEnsureExecutesOnceAndEveryThreadHasTheSlack(t *testing.T) {
	// A slack the test's threads do not have already.
	want := 3 * time.Millisecond
	if cur, _ := Current(); cur == want {
		want = 4 * time.Millisecond
	}
	ns := strconv.FormatInt(want.Nanoseconds(), 10)
	r, inherited := runHelper(t, want.String())
	if len(r.other) > 0 {
		t.Fatalf("helper said %q", r.other)
	}
	// One execution again, in the same process.
	if len(r.pids) != 2 || r.pids[0] != r.pids[1] {
		t.Fatalf("images started: pids %v, want the same pid twice", r.pids)
	}
	if len(r.slacks) != 1 || r.slacks[ns] < 5 {
		t.Fatalf("threads' slack %v, want every thread (at least 5) at %s ns", r.slacks, ns)
	}
	// A process started through StartChild has the slack the helper was
	// started with; one started plainly has the helper's. (The helper
	// said nothing else: its environment no longer passes the value on.)
	if r.child != inherited || r.combined != inherited || r.plain != ns {
		t.Fatalf("children's slack: through StartChild %s, through CombinedOutput %s, plainly %s; want %s, %s and %s",
			r.child, r.combined, r.plain, inherited, inherited, ns)
	}
}

func TestEnsureLeavesAProcessThatHasTheSlack(t *testing.T) {
	cur, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	r, inherited := runHelper(t, cur.String())
	if len(r.other) > 0 || len(r.pids) != 1 {
		t.Fatalf("images started %v, said %q; want one start and nothing said", r.pids, r.other)
	}
	if len(r.slacks) != 1 || r.slacks[inherited] == 0 || r.child != inherited || r.plain != inherited {
		t.Fatalf("threads' slack %v, children's %s and %s; want all at the inherited %s ns", r.slacks, r.child, r.plain, inherited)
	}
}

func TestEnsureOffOrRefusedChangesNothing(t *testing.T) {
	for _, tc := range []struct{ env, said string }{
		{env: "off"},
		{env: "fast", said: "ensure: " + EnvVar + `="fast": not a duration (say 1ms) or off`},
		{env: "10s", said: "ensure: " + EnvVar + `="10s": out of range`},
	} {
		r, inherited := runHelper(t, tc.env)
		if len(r.pids) != 1 {
			t.Errorf("%s: images started %v, want one", tc.env, r.pids)
		}
		if len(r.slacks) != 1 || r.slacks[inherited] == 0 || r.child != inherited || r.plain != inherited {
			t.Errorf("%s: threads' slack %v, children's %s and %s; want all at the inherited %s ns", tc.env, r.slacks, r.child, r.plain, inherited)
		}
		switch {
		case tc.said == "" && len(r.other) > 0:
			t.Errorf("%s: helper said %q, want nothing", tc.env, r.other)
		case tc.said != "" && (len(r.other) != 1 || !strings.HasPrefix(r.other[0], tc.said)):
			t.Errorf("%s: helper said %q, want %q", tc.env, r.other, tc.said)
		}
	}
}

// The value passed on is taken only when it is a slack other than the
// one the process has, and never stays in the environment.
func TestAdoptInherited(t *testing.T) {
	defer inherited.Store(0)
	for _, tc := range []struct {
		env  string
		set  bool
		want time.Duration
	}{
		{env: "50000", set: true, want: 50 * time.Microsecond},
		{env: "1000000", set: true}, // the slack it has: nothing to restore
		{env: "fast", set: true},
		{env: "-5", set: true},
		{set: false},
	} {
		inherited.Store(0)
		if tc.set {
			t.Setenv(inheritedEnv, tc.env)
		}
		adoptInherited(time.Millisecond)
		if got := Inherited(); got != tc.want {
			t.Errorf("%q: Inherited() = %s, want %s", tc.env, got, tc.want)
		}
		if out, err := CombinedOutput(exec.Command("cat", "/proc/self/timerslack_ns")); err == nil {
			os.Stdout.WriteString("combined " + strings.TrimSpace(string(out)) + "\n")
		}
		if v, ok := os.LookupEnv(inheritedEnv); ok {
			t.Errorf("%q: the environment still holds %q", tc.env, v)
		}
	}
}
