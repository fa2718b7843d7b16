package slurm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

// hostile are arguments a shell would act on if they were concatenated
// into a command line.
var hostile = []string{
	"plain", "two words", `it's`, `"double"`, "$(touch /tmp/taskmesh-pwned)", "`id`", "$HOME",
	"a;b", "x && echo injected", "line1\nline2", "*", "'; echo pwned; '", "中文 ✓", "",
}

// The task is the job: its argv arrives byte for byte (no shell sees the
// user's strings), its output comes from Slurm's files, its exit code
// from the job record, and it starts before it completes.
func TestBatchRunsTheTaskAsTheJob(t *testing.T) {
	w := newWorld(t, ModeBatch)
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "printf", Args: append([]string{"[%s]\\n"}, hostile...),
		Timeout: 120, Priority: 5, Env: map[string]string{"GREETING": "hello world", "TASKMESH_TASK_ID": "forged"}})[0]
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetError() != "" {
		t.Fatalf("outcome exit %d error %q stderr %q", done.GetExitCode(), done.GetError(), done.GetStderr())
	}
	var want strings.Builder
	for _, a := range hostile {
		want.WriteString("[" + a + "]\n")
	}
	if done.GetStdout() != want.String() {
		t.Fatalf("stdout\n%q\nwant\n%q", done.GetStdout(), want.String())
	}
	if len(w.fake.Calls("StartTask")) == 0 {
		t.Fatal("the task was completed without being started")
	}

	// Environment, exit code and stderr of a failing script task.
	id = w.fake.Add(&taskv1.Task{Type: "script", Command: `echo "$GREETING $1 $TASKMESH_TASK_ID"; echo oops >&2; exit 3`,
		Args: []string{"it's me"}, Timeout: 120, Env: map[string]string{"GREETING": "hello world", "TASKMESH_TASK_ID": "forged"}})[0]
	done = w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 3 || done.GetStderr() != "oops\n" {
		t.Fatalf("outcome exit %d stderr %q error %q", done.GetExitCode(), done.GetStderr(), done.GetError())
	}
	if want := "hello world it's me " + id + "\n"; done.GetStdout() != want {
		t.Fatalf("stdout %q, want %q (TASKMESH_ names are the platform's)", done.GetStdout(), want)
	}
}

// A task past its timeout is ended by Slurm as TIMEOUT and fails. Slurm
// counts time limits in whole minutes: on v0.0.38 the job ends within a
// minute (and slurmctld's next check) of its start.
func TestBatchTimeoutEndsAsTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ModeBatch)
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "sleep", Args: []string{"300"}, Timeout: 2})[0]
	done := w.fake.WaitComplete(t, id, 150*time.Second)
	if done.GetExitCode() == 0 || !strings.Contains(done.GetError(), "TIMEOUT") || !strings.Contains(done.GetError(), "timeout after 2s") {
		t.Fatalf("outcome exit %d error %q, want a TIMEOUT failure", done.GetExitCode(), done.GetError())
	}
	job := w.jobOf(id, "the job's record", func(j Job) bool { return j.Final() })
	if job.State != StateTimeout {
		t.Fatalf("job state %s, want TIMEOUT", job.State)
	}
}

// A batch job's progress lines reach the task.
func TestBatchProgressLinesAreReported(t *testing.T) {
	w := newWorld(t, ModeBatch)
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60,
		Command: `echo "::progress::40 loading"; sleep 2; echo "70 writing" > "$TASKMESH_PROGRESS_FILE"; sleep 2`})[0]
	w.fake.WaitComplete(t, id, 60*time.Second)
	got := strings.Join(w.progressMessages(id), "|")
	if !strings.Contains(got, "40 loading") || !strings.Contains(got, "70 writing") {
		t.Fatalf("progress reports %q, want 40 loading and 70 writing", got)
	}
}

// Output of 64 KiB or more goes to the object store as the agent's JSON
// result object; its tails travel inline.
func TestBatchLargeOutputIsUploaded(t *testing.T) {
	var mu sync.Mutex
	uploads := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		uploads[r.URL.Path] = body
		mu.Unlock()
	}))
	defer srv.Close()
	w := newWorld(t, ModeBatch)
	w.fake.SetUploadURL(srv.URL)
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 60, Command: `head -c 100000 /dev/zero | tr '\0' x; echo; echo done`})[0]
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetResultObject() == nil || done.GetResultObject().GetSizeBytes() < 100000 {
		t.Fatalf("result object %v, want the uploaded output", done.GetResultObject())
	}
	if !strings.HasSuffix(done.GetStdout(), "x\ndone\n") || len(done.GetStdout()) > tailBytes {
		t.Fatalf("inline stdout is %d bytes ending %q, want the tail", len(done.GetStdout()), done.GetStdout()[max(0, len(done.GetStdout())-10):])
	}
	mu.Lock()
	defer mu.Unlock()
	body := uploads["/"+done.GetResultObject().GetKey()]
	if !strings.Contains(string(body), `"stdout":"xxxx`) || !strings.Contains(string(body), `"stdout_truncated_bytes":0`) {
		t.Fatalf("uploaded object starts %q", string(body[:min(len(body), 80)]))
	}
}

// Slurm refuses a job no configured node could ever run: the task fails
// with Slurm's own words.
func TestBatchJobSlurmRefusesFailsTheTask(t *testing.T) {
	w := newWorld(t, ModeBatch)
	w.start()
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "true", Timeout: 60, Resources: map[string]string{"nvidia.com/gpu": "64"}})[0]
	done := w.fake.WaitComplete(t, id, 30*time.Second)
	if done.GetExitCode() == 0 || !strings.Contains(done.GetError(), "Requested node configuration is not available") {
		t.Fatalf("outcome exit %d error %q", done.GetExitCode(), done.GetError())
	}
	// A resource Slurm has no name for is refused before Slurm is asked.
	id = w.fake.Add(&taskv1.Task{Type: "shell", Command: "true", Timeout: 60, Resources: map[string]string{"example.com/fpga": "1"}})[0]
	done = w.fake.WaitComplete(t, id, 30*time.Second)
	if !strings.Contains(done.GetError(), "example.com/fpga") || !strings.Contains(done.GetError(), "no Slurm equivalent") {
		t.Fatalf("outcome error %q", done.GetError())
	}
}

// A workdir that does not exist is made and the task runs there, as on an
// agent; one that cannot be made fails the attempt before anything of the
// task runs, never running it elsewhere (Slurm's own fallback is /tmp).
// The path is quoted like any user string.
func TestBatchWorkdirIsMadeOrTheAttemptFails(t *testing.T) {
	w := newWorld(t, ModeBatch)
	w.start()
	base := filepath.Join(w.cluster.JobDir, fmt.Sprintf("wd-%d-%d", os.Getpid(), time.Now().UnixNano()))
	dir := filepath.Join(base, "new dir", "it's $(touch pwned)")
	id := w.fake.Add(&taskv1.Task{Type: "shell", Command: "pwd", Timeout: 60, Workdir: dir})[0]
	done := w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 0 || done.GetError() != "" || done.GetStdout() != dir+"\n" {
		t.Fatalf("outcome exit %d error %q stdout %q stderr %q, want it run in %s",
			done.GetExitCode(), done.GetError(), done.GetStdout(), done.GetStderr(), dir)
	}

	// A regular file where a directory would have to be made.
	blocker := base + "-file"
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(blocker) })
	id = w.fake.Add(&taskv1.Task{Type: "shell", Command: "pwd", Timeout: 60, Workdir: filepath.Join(blocker, "sub")})[0]
	done = w.fake.WaitComplete(t, id, 60*time.Second)
	if done.GetExitCode() != 125 || done.GetStdout() != "" ||
		!strings.Contains(done.GetStderr(), "taskmesh: workdir "+filepath.Join(blocker, "sub")+" cannot be made or entered") {
		t.Fatalf("outcome exit %d error %q stdout %q stderr %q, want exit 125 and the workdir named",
			done.GetExitCode(), done.GetError(), done.GetStdout(), done.GetStderr())
	}
}

// A backend cut off from the server cancels its jobs before the server
// may lease their tasks again (docs/executor.md, "Fencing"), even one
// whose script ignores SIGTERM, and reports the attempt fenced once the
// server answers again. Slurm kills the job's processes KillWait after the
// cancel (5 s in the test cluster).
func TestCutOffBackendCancelsItsJobsBeforeTheServerMovesThem(t *testing.T) {
	const lostAfter = 3 * time.Second // a fence of 2 s
	w := newWorld(t, ModeBatch)
	w.cfg.AgentLostAfter = lostAfter
	cancels := &cancelRecorder{Client: w.client}
	w.api = cancels
	w.start()
	pidFile := filepath.Join(w.cluster.JobDir, fmt.Sprintf("fenced-%d-%d.pid", os.Getpid(), agentSeq.Load()))
	t.Cleanup(func() { os.Remove(pidFile) })
	id := w.fake.Add(&taskv1.Task{Type: "script", Timeout: 600,
		Command: `trap '' TERM; echo $$ > "$1"; while :; do sleep 0.2; done`, Args: []string{pidFile}})[0]
	job := w.jobOf(id, "the job running", func(j Job) bool { return j.State == StateRunning })
	pid := waitPID(t, pidFile, 30*time.Second)

	cut := time.Now()
	cutOff(w.fake)
	leasetest.WaitFor(t, 20*time.Second, "the job cancelled", func() bool { return !cancels.at(job.ID).IsZero() })
	cancelled := cancels.at(job.ID)
	heard := w.fake.LastHeard(cut)
	if releasable := heard.Add(lostAfter); !cancelled.Before(releasable) {
		t.Fatalf("job cancelled %s after the server last heard from the backend; it could lease the task again after %s", cancelled.Sub(heard), lostAfter)
	}
	if early := heard.Add(2*time.Second - 300*time.Millisecond); cancelled.Before(early) {
		t.Fatalf("job cancelled %s after the server last heard from the backend, before the fence", cancelled.Sub(heard))
	}
	// Slurm's part: SIGTERM, KillWait, SIGKILL.
	leasetest.WaitFor(t, 20*time.Second, "the script killed", func() bool { return syscall.Kill(pid, 0) != nil })
	if took := time.Since(cancelled); took > 5*time.Second+3*time.Second {
		t.Fatalf("the script outlived the cancel by %s, past Slurm's KillWait of 5 s", took)
	}

	w.fake.SetFail(nil)
	done := w.fake.WaitComplete(t, id, 30*time.Second)
	if !strings.HasPrefix(done.GetError(), "fenced: ") || done.GetExitCode() != -1 {
		t.Fatalf("outcome exit %d error %q, want the attempt reported fenced", done.GetExitCode(), done.GetError())
	}
}

// A heartbeat interval under which the fence could pass between two
// answered heartbeats is a configuration error.
func TestHeartbeatIntervalMustFitTheFence(t *testing.T) {
	cfg := Config{AgentID: "s", HeartbeatInterval: 7 * time.Second, Job: JobConfig{Mode: ModeBatch, JobDir: t.TempDir()}}
	if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "heartbeat interval") {
		t.Fatalf("err %v, want the heartbeat interval refused for the default 12 s fence", err)
	}
	cfg.HeartbeatInterval = 6 * time.Second
	if _, err := cfg.withDefaults(); err != nil {
		t.Fatalf("6 s heartbeats under a 12 s fence: %v", err)
	}
}

// cancelRecorder is slurmrestd, recording when each job was first
// cancelled.
type cancelRecorder struct {
	*Client
	mu    sync.Mutex
	times map[int64]time.Time
}

func (c *cancelRecorder) Cancel(ctx context.Context, id int64) error {
	c.mu.Lock()
	if c.times == nil {
		c.times = map[int64]time.Time{}
	}
	if _, ok := c.times[id]; !ok {
		c.times[id] = time.Now()
	}
	c.mu.Unlock()
	return c.Client.Cancel(ctx, id)
}

func (c *cancelRecorder) at(id int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.times[id]
}

// waitPID waits for a task's script to write its pid to file.
func waitPID(t *testing.T, file string, limit time.Duration) int {
	t.Helper()
	var pid int
	leasetest.WaitFor(t, limit, "the task's pid in "+file, func() bool {
		b, err := os.ReadFile(file)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// cutOff makes every call to the lease server fail as an unreachable
// server's would, until SetFail(nil).
func cutOff(f *leasetest.Fake) {
	f.SetFail(func(string, proto.Message) error { return status.Error(codes.Unavailable, "cut off") })
}
