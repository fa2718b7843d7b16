package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/timerslack"

	"github.com/taskmesh/taskmesh/platform/freeport"
)

// TestMain lets the test binary act as the taskmesh binary: the dev test
// runs it as `taskmesh dev`, and the local agent re-executes it as
// `taskmesh executor shim …` and, for pipeline stages, `taskmesh
// pipeline-stage …`.
func TestMain(m *testing.M) {
	if os.Getenv("TASKMESH_TEST_AS_BINARY") != "" || (len(os.Args) > 2 && os.Args[1] == "executor" && os.Args[2] == "shim") ||
		(len(os.Args) > 1 && os.Args[1] == "pipeline-stage") {
		main()
		os.Exit(0)
	}
	pgtest.Main(m) // the quota process test's database

}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type devProcess struct {
	cmd  *exec.Cmd
	out  *logbuf.Buffer
	done chan error // the exit, once
}

// startDev runs `taskmesh dev` on dir (with extra flags) and waits for its
// banner.
func startDev(t *testing.T, dir string, ports [4]int, extra ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"dev", "--data-dir", dir,
		"--http", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--grpc", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--pg-port", fmt.Sprint(ports[2]), "--kafka-port", fmt.Sprint(ports[3]), "--agent-local-api", ""}, extra...)...)
	cmd.Env = append(os.Environ(), "TASKMESH_TEST_AS_BINARY=1")
	cmd.Args[0] = "taskmesh"
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProcess{cmd: cmd, out: &logbuf.Buffer{}, done: make(chan error, 1)}
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			_, _ = p.out.Write([]byte(sc.Text() + "\n"))
			// The banner's last line: the test reads the keys it shows,
			// so the whole banner must be in before the test goes on.
			if strings.Contains(sc.Text(), "Press Ctrl-C to stop") {
				close(ready)
			}
		}
	}()
	go func() { p.done <- cmd.Wait(); pw.Close() }()
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("taskmesh dev exited:\n%s", p.out)
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("taskmesh dev did not start:\n%s", p.out)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("taskmesh dev exited with %v:\n%s", err, p.out)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("taskmesh dev did not stop:\n%s", p.out)
	}
}

func rest(t *testing.T, method, url, key string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d %v %v", method, url, resp.StatusCode, out, err)
	}
	return out
}

func waitCompleted(t *testing.T, base, key, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		task := rest(t, "GET", base+"/api/v1/tasks/"+id, key, nil)
		if task["status"] == "completed" {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %v", id, task["status"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// `taskmesh dev` starts everything with one command, runs a task on its
// local agent, and after a stop and a start still has every task.
func TestDevRunsTasksAndKeepsThemAcrossRestarts(t *testing.T) {
	if _, err := os.Stat("/usr/lib/postgresql"); err != nil {
		t.Fatalf("PostgreSQL server binaries are needed: %v", err)
	}
	dir, err := os.MkdirTemp("", "tmdev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Searchable by the postgres user, so the cluster stays under dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := [4]int{freePort(t), freePort(t), freePort(t), freePort(t)}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])

	first := startDev(t, dir, ports)
	keyBytes, err := os.ReadFile(filepath.Join(dir, "demo-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyBytes))
	if !strings.Contains(first.out.String(), key) {
		t.Fatalf("the banner does not show the demo key:\n%s", first.out)
	}
	// The operator key sits next to the demo key, private, and works on
	// the admin API.
	adminFile := filepath.Join(dir, "admin-key")
	adminBytes, err := os.ReadFile(adminFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(adminFile); err != nil || fi.Mode().Perm() != 0o600 || !strings.Contains(first.out.String(), adminFile) {
		t.Fatalf("operator key file %v %v; banner:\n%s", fi, err, first.out)
	}
	adminKey := strings.TrimSpace(string(adminBytes))
	if demo := rest(t, "GET", base+"/api/v1/admin/tenants/demo", adminKey, nil); demo["tier"] != "standard" {
		t.Fatalf("demo tenant through the admin API = %v", demo)
	}
	created := rest(t, "POST", base+"/api/v1/tasks", key, map[string]any{"name": "before restart", "command": "echo", "args": []string{"kept"}})
	id := created["id"].(string)
	if done := waitCompleted(t, base, key, id); done["stdout"] != "kept\n" {
		t.Fatalf("task = %v", done)
	}
	first.stop(t)

	second := startDev(t, dir, ports)
	again := rest(t, "GET", base+"/api/v1/tasks/"+id, key, nil)
	if again["status"] != "completed" || again["stdout"] != "kept\n" {
		t.Fatalf("after restart: %v", again)
	}
	if b, err := os.ReadFile(adminFile); err != nil || strings.TrimSpace(string(b)) != adminKey {
		t.Fatalf("the operator key changed across a restart: %v", err)
	}
	rest(t, "GET", base+"/api/v1/admin/tenants", adminKey, nil)
	created = rest(t, "POST", base+"/api/v1/tasks", key, map[string]any{"name": "after restart", "command": "echo", "args": []string{"new"}})
	waitCompleted(t, base, key, created["id"].(string))
	// dev runs with the servers' timer slack; its tasks and its Postgres
	// with the one it was started with (this test's).
	inherited, err := timerslack.Current()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d\n", inherited.Nanoseconds())
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", second.cmd.Process.Pid)); err != nil || string(b) != fmt.Sprintf("%d\n", timerslack.Default.Nanoseconds()) {
		t.Errorf("dev's timer slack = %q %v, want %s", b, err, timerslack.Default)
	}
	created = rest(t, "POST", base+"/api/v1/tasks", key, map[string]any{"name": "slack", "command": "cat", "args": []string{"/proc/self/timerslack_ns"}})
	if done := waitCompleted(t, base, key, created["id"].(string)); done["stdout"] != want {
		t.Errorf("a task's timer slack = %q, want %q", done["stdout"], want)
	}
	if pm, err := os.ReadFile(filepath.Join(dir, "pg", "postmaster.pid")); err != nil {
		t.Errorf("postmaster.pid: %v", err)
	} else if b, err := os.ReadFile("/proc/" + strings.Fields(string(pm))[0] + "/timerslack_ns"); err != nil || string(b) != want {
		t.Errorf("Postgres's timer slack = %q %v, want %q", b, err, want)
	}
	if !strings.Contains(second.out.String(), "Local agent    agent-local-1 on ") {
		t.Fatalf("the banner does not show the local agent:\n%s", second.out)
	}
	// make test installs ffmpeg, so the local agent renders video here.
	if ffmpeg, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatalf("ffmpeg: %v (tools/test-deps.sh installs it)", err)
	} else if want := "Video runner   ffmpeg (" + ffmpeg + ")"; !strings.Contains(second.out.String(), want) {
		t.Fatalf("the banner lacks %q:\n%s", want, second.out)
	}
	second.stop(t)

	// Without its agent, dev says so, and where an executor of its own
	// finds the agent's identity.
	third := startDev(t, dir, ports, "--no-agent")
	if want := "Local agent    off (--no-agent; an executor may run as agent-local-1 with the token in " + filepath.Join(dir, "agent-token") + ")"; !strings.Contains(third.out.String(), want) {
		t.Fatalf("the banner of dev --no-agent lacks %q:\n%s", want, third.out)
	}
	if want := "Video runner   none here (--no-agent)"; !strings.Contains(third.out.String(), want) {
		t.Fatalf("the banner of dev --no-agent lacks %q:\n%s", want, third.out)
	}
	third.stop(t)
}

// A local agent without ffmpeg claims no video generations, and they wait
// QUEUED: the banner says so and how to install it, instead of leaving it
// to the agent's log.
func TestVideoRunnerLineSaysWhyVideoWaits(t *testing.T) {
	missing := func(string) (string, error) {
		return "", errors.New(`exec: "ffmpeg": executable file not found in $PATH`)
	}
	got := videoRunner(true, missing)
	for _, want := range []string{"off: ffmpeg is missing", "video generations wait", "apt-get install -y ffmpeg fonts-wqy-zenhei"} {
		if !strings.Contains(got, want) {
			t.Errorf("videoRunner without ffmpeg = %q, want it to contain %q", got, want)
		}
	}
	found := func(name string) (string, error) {
		if name != "" {
			t.Errorf("looked up %q, want the agent's default (ffmpeg on PATH)", name)
		}
		return "/usr/bin/ffmpeg", nil
	}
	if got := videoRunner(true, found); got != "ffmpeg (/usr/bin/ffmpeg)" {
		t.Errorf("videoRunner with ffmpeg = %q", got)
	}
	if got := videoRunner(false, found); got != "none here (--no-agent)" {
		t.Errorf("videoRunner without an agent = %q", got)
	}
}
