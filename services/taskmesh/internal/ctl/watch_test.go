package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
)

// scriptedWatch is a TaskService whose n-th WatchTask sends script[n]'s
// tasks and then ends with its error (nil: a clean end of stream).
type scriptedWatch struct {
	taskv1.UnimplementedTaskServiceServer
	mu     sync.Mutex
	calls  int
	script []watchStep
}

type watchStep struct {
	send []*taskv1.Task
	end  error
}

func (s *scriptedWatch) WatchTask(r *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
	s.mu.Lock()
	n := s.calls
	s.calls++
	s.mu.Unlock()
	if n >= len(s.script) {
		return status.Error(codes.Internal, "script exhausted")
	}
	for _, t := range s.script[n].send {
		if err := stream.Send(&taskv1.WatchTaskResponse{Task: t}); err != nil {
			return err
		}
	}
	return s.script[n].end
}

var t0 = time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)

// at builds a task state at t0+sec.
func at(sec int, version int32, status string, progress int32, msg, attempt string) *taskv1.Task {
	return &taskv1.Task{Id: "t1", Status: status, Progress: progress, ProgressMessage: msg, AttemptId: attempt,
		Version: version, UpdatedAt: timestamppb.New(t0.Add(time.Duration(sec) * time.Second))}
}

// newTestWatcher watches through a real gRPC connection to srv.
func newTestWatcher(t *testing.T, srv taskv1.TaskServiceServer, format string) (*watcher, *logbuf.Buffer, *logbuf.Buffer) {
	t.Helper()
	addr := serve(t, func(s *grpc.Server) { taskv1.RegisterTaskServiceServer(s, srv) })
	c, err := dial(Settings{Server: addr, Target: addr, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	out, errOut := &logbuf.Buffer{}, &logbuf.Buffer{}
	return &watcher{tasks: c.tasks, out: out, errOut: errOut, format: format, now: time.Now,
		minBackoff: time.Millisecond, maxBackoff: 5 * time.Millisecond, giveUp: time.Minute}, out, errOut
}

// A stream that breaks, or ends before the task is final, is re-opened;
// the state a new stream starts with is not printed again, nor are
// updates that change nothing a line shows.
func TestWatchReconnectsWithoutDuplicates(t *testing.T) {
	srv := &scriptedWatch{script: []watchStep{
		{send: []*taskv1.Task{at(0, 1, "pending", 0, "", ""), at(1, 2, "assigned", 0, "", "a1"), at(2, 3, "running", 10, "", "a1")},
			end: status.Error(codes.Unavailable, "transport is closing")},
		{send: []*taskv1.Task{at(2, 3, "running", 10, "", "a1"), at(3, 4, "running", 10, "", "a1"), at(4, 5, "running", 50, "half way", "a1")},
			end: nil},
		{send: []*taskv1.Task{at(4, 5, "running", 50, "half way", "a1"), at(5, 6, "completed", 100, "done", "a1")}},
	}}
	w, out, errOut := newTestWatcher(t, srv, formatTable)
	final, err := w.run(context.Background(), "t1")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if final.GetStatus() != "completed" {
		t.Errorf("final status %q", final.GetStatus())
	}
	want := []string{
		"2026-02-05T12:00:00Z pending 0%",
		"2026-02-05T12:00:01Z assigned 0% attempt=a1",
		"2026-02-05T12:00:02Z running 10% attempt=a1",
		`2026-02-05T12:00:04Z running 50% attempt=a1 message="half way"`,
		`2026-02-05T12:00:05Z completed 100% attempt=a1 message="done"`,
	}
	if got := lines(out.String()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := strings.Count(errOut.String(), "reconnecting"); n != 2 {
		t.Errorf("stderr has %d reconnect notes, want 2:\n%s", n, errOut.String())
	}
	if srv.calls != 3 {
		t.Errorf("WatchTask called %d times, want 3", srv.calls)
	}
}

func TestWatchOutcomes(t *testing.T) {
	failed := at(1, 2, "failed", 30, "", "a1")
	failed.ExitCode, failed.Error = new(int32), proto.String("exit status 3")
	*failed.ExitCode = 3
	tests := []struct {
		name      string
		script    []watchStep
		wantErr   string
		wantCalls int
	}{
		{"failed", []watchStep{{send: []*taskv1.Task{at(0, 1, "running", 0, "", "a1"), failed}}},
			"task t1 failed: exit status 3", 1},
		{"cancelled", []watchStep{{send: []*taskv1.Task{at(0, 1, "cancelled", 0, "", "")}}},
			"task t1 cancelled", 1},
		{"not found is an answer, not a broken stream", []watchStep{{end: businessStatus(codes.NotFound, "task t1 not found", "TASK_NOT_FOUND", "30004")}},
			"task t1 not found", 1},
		{"denied", []watchStep{{end: status.Error(codes.PermissionDenied, "no")}}, "no", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scriptedWatch{script: tt.script}
			w, _, _ := newTestWatcher(t, srv, formatTable)
			_, err := w.run(context.Background(), "t1")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
			if ExitCode(err) != ExitError {
				t.Errorf("exit code %d", ExitCode(err))
			}
			if srv.calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", srv.calls, tt.wantCalls)
			}
		})
	}
}

func TestWatchGivesUp(t *testing.T) {
	var script []watchStep
	for range 1000 {
		script = append(script, watchStep{end: status.Error(codes.Unavailable, "down")})
	}
	w, _, _ := newTestWatcher(t, &scriptedWatch{script: script}, formatTable)
	w.connected = true // giving up is for a watch that had connected
	w.giveUp = 30 * time.Millisecond
	_, err := w.run(context.Background(), "t1")
	msg := FormatError(err)
	if !strings.HasPrefix(msg, "error: watch t1: gave up reconnecting after 30ms: cannot reach ") || !strings.HasSuffix(msg, ": down (code 503 unavailable)") {
		t.Fatalf("error = %v", err)
	}
}

func TestWatchJSONLines(t *testing.T) {
	srv := &scriptedWatch{script: []watchStep{{send: []*taskv1.Task{at(0, 1, "running", 5, "", "a1"), at(0, 1, "running", 5, "", "a1"),
		at(1, 2, "completed", 100, "", "a1")}}}}
	w, out, _ := newTestWatcher(t, srv, formatJSON)
	if _, err := w.run(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	got := lines(out.String())
	if len(got) != 2 || !strings.Contains(got[0], `"status":"running"`) || !strings.Contains(got[1], `"status":"completed"`) {
		t.Errorf("json lines:\n%s", out.String())
	}
}

// On a terminal, each change is a line and a progress bar follows the
// last one; it is erased before the next line and at the end.
func TestWatchProgressBar(t *testing.T) {
	var out bytes.Buffer
	w := &watcher{out: &out, errOut: &out, format: formatTable, bar: true, now: time.Now}
	for _, task := range []*taskv1.Task{at(0, 1, "running", 40, "epoch 4/10", "a1"), at(1, 2, "completed", 100, "", "a1")} {
		if err := w.show(task); err != nil {
			t.Fatal(err)
		}
	}
	w.clearBar()
	want := `2026-02-05T12:00:00Z running 40% attempt=a1 message="epoch 4/10"` + "\n" +
		"\r[############..................]  40% running" +
		"\r\x1b[K" + `2026-02-05T12:00:01Z completed 100% attempt=a1` + "\n"
	if out.String() != want {
		t.Errorf("terminal output\n %q\nwant\n %q", out.String(), want)
	}
}

func TestWatchLine(t *testing.T) {
	done := at(9, 7, "failed", 80, `said "bye"`, "a2")
	done.ExitCode = new(int32)
	*done.ExitCode = 137
	done.Error = proto.String("killed")
	want := `2026-02-05T12:00:09Z failed 80% attempt=a2 message="said \"bye\"" exit_code=137 error="killed"`
	if got := watchLine(done, time.Now); got != want {
		t.Errorf("line\n %s\nwant\n %s", got, want)
	}
	noTime := &taskv1.Task{Status: "pending"}
	if got := watchLine(noTime, func() time.Time { return t0 }); got != "2026-02-05T12:00:00Z pending 0%" {
		t.Errorf("line without updated_at: %s", got)
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{errStreamEnded, true},
		{status.Error(codes.Unavailable, "x"), true},
		{status.Error(codes.Internal, "stream reset"), true},
		{businessStatus(codes.Internal, "internal error", "INTERNAL", "30099"), false},
		{businessStatus(codes.NotFound, "gone", "TASK_NOT_FOUND", "30004"), false},
		{status.Error(codes.Unauthenticated, "x"), false},
		{errors.New("write: broken pipe"), false},
	}
	for _, tt := range tests {
		if got := retryable(tt.err); got != tt.want {
			t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// Once a stream has delivered a message, a failing re-open (nothing
// received) is still a broken connection, to re-open again.
func TestWatchReconnectsOnceConnected(t *testing.T) {
	srv := &scriptedWatch{script: []watchStep{
		{send: []*taskv1.Task{at(0, 1, "running", 10, "", "a1")}, end: status.Error(codes.Unavailable, "transport is closing")},
		{end: status.Error(codes.Unavailable, "connection refused")},
		{send: []*taskv1.Task{at(1, 2, "completed", 100, "", "a1")}},
	}}
	w, _, errOut := newTestWatcher(t, srv, formatTable)
	if _, err := w.run(context.Background(), "t1"); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	if srv.calls != 3 {
		t.Errorf("WatchTask called %d times, want 3", srv.calls)
	}
}

// A watch that never reached the server (nothing listens, or the server
// never answers) fails after its first attempt like any other command,
// instead of reconnecting until it gives up.
func TestWatchNeverConnectedFails(t *testing.T) {
	refused, silent := refusedAddr(t), silentServer(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"task, nothing listens", []string{"tasks", "watch", "t1", "--server", refused},
			"error: watch t1: cannot reach " + refused + ": "},
		{"group, nothing listens", []string{"groups", "watch", "g1", "--server", refused},
			"error: watch g1: cannot reach " + refused + ": "},
		{"task, silent server", []string{"tasks", "watch", "t1", "--server", silent, "--timeout", "300ms"},
			"error: watch t1: no answer from the server within 300ms (code 504 deadline exceeded)"},
		{"group, silent server", []string{"groups", "watch", "g1", "--server", silent, "--timeout", "300ms"},
			"error: watch g1: no answer from the server within 300ms (code 504 deadline exceeded)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, took := testApp(EnvAPIKey, "k").runFor(t, 20*time.Second, tt.args...)
			if r.code != ExitError || !strings.HasPrefix(r.stderr, tt.want) || len(lines(r.stderr)) != 1 {
				t.Fatalf("exit %d after %s, stderr:\n%s\nwant one line starting %q", r.code, took, r.stderr, tt.want)
			}
			if took > 5*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

// blockingWatch sends a running task and then waits for the client to go.
type blockingWatch struct {
	taskv1.UnimplementedTaskServiceServer
}

func (blockingWatch) WatchTask(r *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
	if err := stream.Send(&taskv1.WatchTaskResponse{Task: at(0, 1, "running", 5, "", "a1")}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// Ctrl-C on a watch exits 130, not 1 (a failed task), with a short note.
func TestWatchInterrupted(t *testing.T) {
	addr := serve(t, func(s *grpc.Server) { taskv1.RegisterTaskServiceServer(s, blockingWatch{}) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut logbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- testApp(EnvAPIKey, "k").main(ctx, []string{"tasks", "watch", "t1", "--server", addr}, strings.NewReader(""), &out, &errOut)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), " running 5%") {
		if time.Now().After(deadline) {
			t.Fatalf("no watch line; stderr %q", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitInterrupted || errOut.String() != "interrupted\n" {
			t.Errorf("exit %d, stderr %q; want %d and \"interrupted\"", code, errOut.String(), ExitInterrupted)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop")
	}
}

// submitAndWatch creates task t1 and watches it as scriptedWatch does.
type submitAndWatch struct{ *scriptedWatch }

func (submitAndWatch) CreateTask(context.Context, *taskv1.CreateTaskRequest) (*taskv1.CreateTaskResponse, error) {
	return &taskv1.CreateTaskResponse{TaskIds: []string{"t1"}}, nil
}

// submit -o json --wait prints JSON Lines: the submission, then each
// change. Its watch re-opens a failing stream: creating the task reached
// the server.
func TestSubmitWaitJSONLines(t *testing.T) {
	srv := submitAndWatch{&scriptedWatch{script: []watchStep{
		{end: status.Error(codes.Unavailable, "transport is closing")},
		{send: []*taskv1.Task{at(0, 1, "running", 5, "", "a1"), at(1, 2, "completed", 100, "", "a1")}},
	}}}
	addr := serve(t, func(s *grpc.Server) { taskv1.RegisterTaskServiceServer(s, srv) })
	r := testApp(EnvAPIKey, "k").run(t, `{"task": {"name": "n", "command": "true"}}`,
		"tasks", "submit", "-f", "-", "--wait", "-o", "json", "--server", addr)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := lines(r.stdout)
	if len(got) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", r.stdout)
	}
	for i, l := range got {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d %q is not a JSON object: %v", i+1, l, err)
		}
	}
	if !strings.Contains(got[0], `"task_ids":["t1"]`) || !strings.Contains(got[2], `"status":"completed"`) {
		t.Errorf("lines:\n%s", r.stdout)
	}
}
