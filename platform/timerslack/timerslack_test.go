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

// runHelper starts TestHelperProcess with TASKMESH_TIMER_SLACK set to env
// and returns the pids of its images and the slacks it printed, and any
// other line it printed.
func runHelper(t *testing.T, env string) (pids []string, slacks map[string]int, other []string) {
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
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	slacks = map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if v, ok := strings.CutPrefix(line, "slack "); ok {
			slacks[v]++
		} else if v, ok := strings.CutPrefix(line, "comm "); ok {
			// The kernel names a process after the file it executes,
			// cut to 15 bytes: executing again must keep the name.
			if want := filepath.Base(os.Args[0]); v != want[:min(len(want), 15)] {
				t.Errorf("the helper is named %q, want %q", v, want)
			}
		} else if line != "" {
			other = append(other, line)
		}
	}
	b, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b)), slacks, other
}

func TestEnsureExecutesOnceAndEveryThreadHasTheSlack(t *testing.T) {
	pids, slacks, other := runHelper(t, "3ms")
	if len(other) > 0 {
		t.Fatalf("helper said %q", other)
	}
	// One execution again, in the same process.
	if len(pids) != 2 || pids[0] != pids[1] {
		t.Fatalf("images started: pids %v, want the same pid twice", pids)
	}
	if len(slacks) != 1 || slacks["3000000"] < 5 {
		t.Fatalf("threads' slack %v, want every thread (at least 5) at 3000000 ns", slacks)
	}
}

func TestEnsureLeavesAProcessThatHasTheSlack(t *testing.T) {
	cur, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	pids, slacks, other := runHelper(t, cur.String())
	if len(other) > 0 || len(pids) != 1 {
		t.Fatalf("images started %v, said %q; want one start and nothing said", pids, other)
	}
	if len(slacks) != 1 || slacks[strconv.FormatInt(cur.Nanoseconds(), 10)] == 0 {
		t.Fatalf("threads' slack %v, want all at the inherited %d ns", slacks, cur.Nanoseconds())
	}
}

func TestEnsureOffOrRefusedChangesNothing(t *testing.T) {
	cur, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	inherited := strconv.FormatInt(cur.Nanoseconds(), 10)
	for _, tc := range []struct{ env, said string }{
		{env: "off"},
		{env: "fast", said: "ensure: " + EnvVar + `="fast": not a duration (say 1ms) or off`},
		{env: "10s", said: "ensure: " + EnvVar + `="10s": out of range`},
	} {
		pids, slacks, other := runHelper(t, tc.env)
		if len(pids) != 1 {
			t.Errorf("%s: images started %v, want one", tc.env, pids)
		}
		if len(slacks) != 1 || slacks[inherited] == 0 {
			t.Errorf("%s: threads' slack %v, want all at the inherited %s ns", tc.env, slacks, inherited)
		}
		switch {
		case tc.said == "" && len(other) > 0:
			t.Errorf("%s: helper said %q, want nothing", tc.env, other)
		case tc.said != "" && (len(other) != 1 || !strings.HasPrefix(other[0], tc.said)):
			t.Errorf("%s: helper said %q, want %q", tc.env, other, tc.said)
		}
	}
}
