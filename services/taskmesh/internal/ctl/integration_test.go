package ctl

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

const (
	gatewaySchema = "gateway"
	internalToken = "ctl-test-internal-token-0123456789"
	tenant        = "tenant-a"
	agentID       = "agent-001"
)

// stack is the real thing in process: PostgreSQL (pgtest), a Kafka-protocol
// broker (kafkatest), the scheduler behind platform/grpcserver, an object
// store, and the gateway whose gRPC front door the CLI talks to.
type stack struct {
	gw          *gateway.Gateway
	apiKey      string
	agentSecret string
	lease       taskv1.LeaseServiceClient // as agent-001, through the gateway
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	broker := kafkatest.New(t, kafkatest.WithPartitions(4))

	schedPool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: scheduler.Schema, MaxConns: 40})
	if err != nil {
		t.Fatal(err)
	}
	gwPool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: gatewaySchema})
	if err != nil {
		t.Fatal(err)
	}

	// Large results go to a filesystem object store whose signed links
	// are served over HTTP, as the gateway does in production.
	mux := http.NewServeMux() // safe to add handlers to while serving
	objectsHTTP := httptest.NewServer(mux)
	secret := make([]byte, 32)
	rand.Read(secret)
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: objectsHTTP.URL + "/objects", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/objects/", objects.Handler())

	svc, err := scheduler.New(scheduler.Config{DB: schedPool, Kafka: broker.Config(), Partitions: 4, Objects: objects,
		Timing: scheduler.Timing{SweepInterval: 100 * time.Millisecond}, Video: &scheduler.VideoConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(ctx, gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		SchedulerTarget: lis.Addr().String(), InternalToken: internalToken, DB: gwPool,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	schedDone, gwDone := make(chan struct{}), make(chan error, 1)
	go srv.Serve(lis)
	go func() { defer close(schedDone); svc.Run(runCtx) }()
	go func() { gwDone <- gw.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-gwDone; err != nil {
			t.Errorf("gateway: %v", err)
		}
		srv.Stop()
		<-schedDone
		objectsHTTP.Close()
		gwPool.Close()
		schedPool.Close()
	})
	waitFor(t, 10*time.Second, "the gateway to be healthy", func() bool {
		resp, err := http.Get("http://" + gw.HTTPAddr() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	creds := gw.Credentials()
	if _, err := creds.CreateTenant(ctx, tenant, "Tenant A", gateway.TierStandard); err != nil {
		t.Fatal(err)
	}
	s := &stack{gw: gw}
	if _, s.apiKey, err = creds.CreateAPIKey(ctx, tenant, "ctl tests", nil); err != nil {
		t.Fatal(err)
	}
	if _, s.agentSecret, err = creds.CreateAgentToken(ctx, agentID, tenant, nil, nil); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer{key: s.agentSecret}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s.lease = taskv1.NewLeaseServiceClient(cc)
	return s
}

// ctl runs `taskmesh ctl args…` against the stack, with the server and key
// in the environment as a user would have them.
func (s *stack) ctl(t *testing.T, args ...string) result {
	t.Helper()
	return testApp(EnvServer, s.gw.GRPCAddr(), EnvAPIKey, s.apiKey).run(t, "", args...)
}

func (s *stack) ctlStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return testApp(EnvServer, s.gw.GRPCAddr(), EnvAPIKey, s.apiKey).run(t, stdin, args...)
}

// ok fails the test unless the command exited 0.
func ok(t *testing.T, r result) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return r
}

// fails checks an error exit with exactly one error line containing want.
func fails(t *testing.T, r result, want string) {
	t.Helper()
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, ExitError, r.stdout, r.stderr)
	}
	errLines := lines(r.stderr)
	last := errLines[len(errLines)-1]
	if !strings.HasPrefix(last, "error: ") || !strings.Contains(last, want) {
		t.Fatalf("stderr = %q, want an error line containing %q", r.stderr, want)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getTask reads a task through `get -o json`.
func (s *stack) getTask(t *testing.T, id string) *taskv1.Task {
	t.Helper()
	r := ok(t, s.ctl(t, "tasks", "get", id, "-o", "json"))
	var task taskv1.Task
	if err := protojson.Unmarshal([]byte(r.stdout), &task); err != nil {
		t.Fatalf("get -o json is not a Task: %v\n%s", err, r.stdout)
	}
	return &task
}

// listIDs reads every matching task id through `list --all -o json`.
func (s *stack) listIDs(t *testing.T, filters ...string) []string {
	t.Helper()
	r := ok(t, s.ctl(t, append([]string{"tasks", "list", "--all", "-o", "json"}, filters...)...))
	var resp taskv1.ListTasksResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	var ids []string
	for _, task := range resp.GetTasks() {
		ids = append(ids, task.GetId())
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...[]string) []string {
	var all []string
	for _, l := range ids {
		all = append(all, l...)
	}
	slices.Sort(all)
	return all
}

// A task file's id names its task: submitting the file again runs it
// again once the task ended; --request-id is a retry key that never
// creates twice.
func TestIntegrationTaskFileRunsAgainOnceItsTaskEnded(t *testing.T) {
	s := newStack(t)
	file := `{"task": {"id": "nightly", "name": "nightly", "type": "shell", "command": "true", "machine_id": "nowhere"}}`
	first := lines(ok(t, s.ctlStdin(t, file, "tasks", "submit", "-f", "-")).stdout)
	if again := lines(ok(t, s.ctlStdin(t, file, "tasks", "submit", "-f", "-")).stdout); len(first) != 1 || !slices.Equal(again, first) {
		t.Fatalf("submitted %q, then while it waits %q: want the same task", first, again)
	}
	ok(t, s.ctl(t, "tasks", "cancel", first[0]))
	second := lines(ok(t, s.ctlStdin(t, file, "tasks", "submit", "-f", "-")).stdout)
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("submitted again after the cancel: %q, want a task other than %s", second, first[0])
	}
	if out := ok(t, s.ctl(t, "tasks", "get", "nightly", "-o", "json")).stdout; !strings.Contains(out, second[0]) {
		t.Errorf("the name names %s, want the new task %s", out, second[0])
	}

	retry := lines(ok(t, s.ctlStdin(t, file, "tasks", "submit", "-f", "-", "--request-id", "nightly-r1")).stdout)
	ok(t, s.ctl(t, "tasks", "cancel", retry[0]))
	if again := lines(ok(t, s.ctlStdin(t, file, "tasks", "submit", "-f", "-", "--request-id", "nightly-r1")).stdout); !slices.Equal(again, retry) {
		t.Errorf("--request-id again after the cancel printed %q, want %q", again, retry)
	}
}

// A file of several documents is checked whole before anything is sent:
// a later document the CLI can refuse itself creates nothing. One only
// the server refuses comes after the earlier ones were created: the error
// names them, and a rerun answers those with an id instead of creating
// them again.
func TestIntegrationMultiDocumentFiles(t *testing.T) {
	s := newStack(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}

	local := write("local.yaml", "task: {id: multi-first, name: first, command: \"true\", machine_id: nowhere}\n---\ntask: {name: second, command: \"true\", priority: 99}\n")
	fails(t, s.ctl(t, "tasks", "submit", "-f", local), local+":3: task.priority: 99 is out of range (1 to 10)")
	if ids := s.listIDs(t); len(ids) != 0 {
		t.Fatalf("a refused file created %q", ids)
	}

	server := write("server.yaml", "task: {id: multi-first, name: first, command: \"true\", machine_id: nowhere}\n---\ntask: {name: second, command: \"true\", distribution: {mode: sometimes}}\n")
	r := s.ctl(t, "tasks", "submit", "-f", server)
	first := lines(r.stdout)
	if len(first) != 1 {
		t.Fatalf("stdout %q, want the first document's task", r.stdout)
	}
	fails(t, r, server+":3: ")
	fails(t, r, "; submitted before it: "+first[0]+" ("+server+":1)")
	again := s.ctl(t, "tasks", "submit", "-f", server)
	fails(t, again, "; submitted before it: "+first[0]+" ("+server+":1)")
	if ids := s.listIDs(t); !slices.Equal(ids, first) {
		t.Fatalf("after a rerun the tasks are %q, want only %q", ids, first)
	}

	groups := write("groups.yaml", "group: {name: multi-first, tasks: [{name: a, command: \"true\", machine_id: nowhere}]}\n---\n"+
		"group:\n  mode: dag\n  tasks:\n    - {id: a, name: a, command: \"true\", depends_on: [b]}\n    - {id: b, name: b, command: \"true\", depends_on: [a]}\n")
	r = s.ctl(t, "groups", "submit", "-f", groups)
	gid, _, _ := strings.Cut(r.stdout, "\t")
	if gid == "" {
		t.Fatalf("stdout %q, want the first group", r.stdout)
	}
	fails(t, r, "; submitted before it: "+gid+" ("+groups+":1)")
}

// TestIntegrationExampleFilesAndManagement submits every example task
// file and manages the tasks through list, get, cancel, retry and delete.
func TestIntegrationExampleFilesAndManagement(t *testing.T) {
	s := newStack(t)

	// A single task: its id names it, so a second submit while it waits
	// creates nothing and prints the same task id.
	single := lines(ok(t, s.ctl(t, "tasks", "submit", "-f", "testdata/single_task.yaml")).stdout)
	if len(single) != 1 {
		t.Fatalf("single task printed %q", single)
	}
	again := lines(ok(t, s.ctl(t, "tasks", "submit", "-f", "testdata/single_task.yaml")).stdout)
	if !slices.Equal(again, single) {
		t.Errorf("re-submit printed %q, want %q", again, single)
	}

	// A stability test on two targets makes two tasks; --request-id makes
	// the id-less file idempotent too.
	targets := lines(ok(t, s.ctl(t, "tasks", "submit", "-f", "testdata/stability_targets.yaml", "--request-id", "stability-1")).stdout)
	if len(targets) != 2 {
		t.Fatalf("targets printed %q, want two ids", targets)
	}
	if again := lines(ok(t, s.ctl(t, "tasks", "submit", "-f", "testdata/stability_targets.yaml", "--request-id", "stability-1")).stdout); !slices.Equal(again, targets) {
		t.Errorf("re-submit with --request-id printed %q, want %q", again, targets)
	}

	// An agent's local queue: state fields ignored with notes.
	queueRun := ok(t, s.ctl(t, "tasks", "submit", "-f", "testdata/local_queue.yaml"))
	queue := lines(queueRun.stdout)
	if len(queue) != 2 {
		t.Fatalf("local queue printed %q", queue)
	}
	if !strings.Contains(queueRun.stderr, `note: testdata/local_queue.yaml:7: task "task-train-001": ignoring state fields status, attempt_id`) {
		t.Errorf("no note on ignored state fields:\n%s", queueRun.stderr)
	}
	// The queue's task-train-001 shares its id with the single-task file:
	// the same request id for the same tenant is the same task.
	if queue[0] != single[0] {
		t.Errorf("task-train-001 from the queue is %s, from the single file %s", queue[0], single[0])
	}

	// A stability test looping inside its command, and a JSON task from
	// standard input, with -o json.
	loop := lines(ok(t, s.ctl(t, "tasks", "submit", "-f", "testdata/stability_inner_loop.yaml")).stdout)
	stdinRun := ok(t, s.ctlStdin(t, `{"task": {"id": "from-stdin", "name": "stdin-task", "type": "noop", "priority": 7}}`,
		"tasks", "submit", "-f", "-", "-o", "json"))
	var subs []submitted
	if err := json.Unmarshal([]byte(stdinRun.stdout), &subs); err != nil || len(subs) != 1 || len(subs[0].TaskIDs) != 1 ||
		subs[0].RequestID != "from-stdin" || subs[0].Source != "<stdin>:1" {
		t.Fatalf("submit -o json: %v\n%s", err, stdinRun.stdout)
	}
	fromStdin := subs[0].TaskIDs

	// get -o json shows every field of the single-task file as the server
	// stored it.
	train := s.getTask(t, single[0])
	wantTrain := &taskv1.Task{Id: single[0], Name: "pytorch-train", Type: "python", Command: "python",
		Args: []string{"train.py", "--epochs=100"}, Workdir: "/workspace", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
		Timeout: 86400, Priority: 3, MaxRetries: 3, RetryDelay: 60, MachineId: "machine-001", Status: "pending",
		LeaseTtlSec: 300, RenewIntervalSec: 60, HeartbeatIntervalSec: 30, GracePeriodSec: 30}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"id", train.GetId(), wantTrain.GetId()}, {"name", train.GetName(), wantTrain.GetName()},
		{"type", train.GetType(), wantTrain.GetType()}, {"command", train.GetCommand(), wantTrain.GetCommand()},
		{"args", strings.Join(train.GetArgs(), " "), strings.Join(wantTrain.GetArgs(), " ")},
		{"workdir", train.GetWorkdir(), wantTrain.GetWorkdir()},
		{"env", train.GetEnv()["CUDA_VISIBLE_DEVICES"], "0"}, {"timeout", train.GetTimeout(), wantTrain.GetTimeout()},
		{"priority", train.GetPriority(), wantTrain.GetPriority()}, {"max_retries", train.GetMaxRetries(), wantTrain.GetMaxRetries()},
		{"retry_delay", train.GetRetryDelay(), wantTrain.GetRetryDelay()}, {"machine_id", train.GetMachineId(), wantTrain.GetMachineId()},
		{"status", train.GetStatus(), wantTrain.GetStatus()}, {"lease_ttl_sec", train.GetLeaseTtlSec(), wantTrain.GetLeaseTtlSec()},
		{"renew_interval_sec", train.GetRenewIntervalSec(), wantTrain.GetRenewIntervalSec()},
		{"heartbeat_interval_sec", train.GetHeartbeatIntervalSec(), wantTrain.GetHeartbeatIntervalSec()},
		{"grace_period_sec", train.GetGracePeriodSec(), wantTrain.GetGracePeriodSec()},
	} {
		if f.got != f.want {
			t.Errorf("task-train-001 %s = %v, want %v", f.name, f.got, f.want)
		}
	}
	raw := ok(t, s.ctl(t, "tasks", "get", single[0], "-o", "json")).stdout
	if !strings.Contains(raw, `"lease_ttl_sec": 300`) || strings.Contains(raw, "leaseTtlSec") {
		t.Errorf("get -o json does not use proto names:\n%s", raw)
	}
	var asYAML map[string]any
	if err := yaml.Unmarshal([]byte(ok(t, s.ctl(t, "tasks", "get", single[0], "-o", "yaml")).stdout), &asYAML); err != nil ||
		asYAML["name"] != "pytorch-train" || asYAML["timeout"] != 86400 {
		t.Errorf("get -o yaml: %v %v", err, asYAML)
	}
	human := ok(t, s.ctl(t, "tasks", "get", single[0])).stdout
	for _, want := range []string{"Name:", "pytorch-train", "Command:", "python train.py --epochs=100", "Env:", "CUDA_VISIBLE_DEVICES=0",
		"Lease:", "ttl 300s, renew every 60s, heartbeat every 30s, grace 30s"} {
		if !strings.Contains(human, want) {
			t.Errorf("get shows no %q:\n%s", want, human)
		}
	}

	// The targets became one task per machine, in one group, repeated once.
	t1, t2 := s.getTask(t, targets[0]), s.getTask(t, targets[1])
	if t1.GetMachineId() != "machine-001" || t2.GetMachineId() != "machine-002" || t1.GetGroupId() == "" || t1.GetGroupId() != t2.GetGroupId() {
		t.Errorf("target tasks: machines %q %q, groups %q %q", t1.GetMachineId(), t2.GetMachineId(), t1.GetGroupId(), t2.GetGroupId())
	}
	if cleanup := s.getTask(t, queue[1]); cleanup.GetName() != "cleanup-workdir" || cleanup.GetMachineId() != "machine-001" ||
		cleanup.GetTimeout() != 600 || cleanup.GetPriority() != 5 || cleanup.GetArgs()[1] != "rm -rf /workspace/tmp/*" {
		t.Errorf("cleanup task = %v", cleanup)
	}

	// list trails writes (it reads a projection of the event stream).
	all := sorted(single, targets, queue[1:], loop, fromStdin)
	waitFor(t, 30*time.Second, "list to show every task", func() bool { return slices.Equal(s.listIDs(t), all) })
	table := ok(t, s.ctl(t, "tasks", "list"))
	rows := lines(table.stdout)
	if !strings.HasPrefix(rows[0], "ID") || strings.Join(strings.Fields(rows[0]), " ") != "ID NAME STATUS PRIO MACHINE CREATED PROGRESS" {
		t.Errorf("table header = %q", rows[0])
	}
	if len(rows) != 1+len(all) {
		t.Errorf("table has %d rows, want %d:\n%s", len(rows)-1, len(all), table.stdout)
	}
	for _, row := range rows[1:] {
		f := strings.Fields(row)
		if len(f) != 7 || !slices.Contains(all, f[0]) || f[2] != "pending" || f[6] != "0%" {
			t.Errorf("row %q", row)
		}
	}
	if got := s.listIDs(t, "--machine", "machine-002"); !slices.Equal(got, targets[1:]) {
		t.Errorf("--machine machine-002: %q", got)
	}
	if got := s.listIDs(t, "--priority", "7"); !slices.Equal(got, fromStdin) {
		t.Errorf("--priority 7: %q", got)
	}
	if got := s.listIDs(t, "--type", "noop"); !slices.Equal(got, fromStdin) {
		t.Errorf("--type noop: %q", got)
	}
	if got := s.listIDs(t, "--type", "python"); !slices.Contains(got, single[0]) || slices.Contains(got, fromStdin[0]) {
		t.Errorf("--type python: %q", got)
	}
	// An unknown type is a usage error, told before anything is sent.
	if r := s.ctl(t, "tasks", "list", "--type", "bash"); r.code != ExitUsage || !strings.Contains(r.stderr, "shell, python, script, noop, video") {
		t.Errorf("--type bash: exit %d, %s", r.code, r.stderr)
	}
	if got := s.listIDs(t, "--group", t1.GetGroupId()); !slices.Equal(got, sorted(targets)) {
		t.Errorf("--group: %q", got)
	}
	if got := s.listIDs(t, "--since", "1h"); !slices.Equal(got, all) {
		t.Errorf("--since 1h: %q", got)
	}
	if got := s.listIDs(t, "--until", "2000-01-01T00:00:00Z"); len(got) != 0 {
		t.Errorf("--until 2000: %q", got)
	}
	// A date is a whole day (UTC), as on the API: --until today includes
	// today's tasks.
	today := time.Now().UTC()
	if got := s.listIDs(t, "--until", today.Format(time.DateOnly)); !slices.Equal(got, all) {
		t.Errorf("--until today: %q", got)
	}
	if got := s.listIDs(t, "--since", today.AddDate(0, 0, 1).Format(time.DateOnly)); len(got) != 0 {
		t.Errorf("--since tomorrow: %q", got)
	}
	page := s.ctl(t, "tasks", "list", "--limit", "2")
	if rows := lines(ok(t, page).stdout); len(rows) != 3 || !strings.Contains(page.stderr, "use --all") {
		t.Errorf("--limit 2: %d rows, stderr %q", len(rows)-1, page.stderr)
	}
	if got := s.listIDs(t, "--limit", "2"); !slices.Equal(got, all) {
		t.Errorf("--all over pages of 2: %q", got)
	}

	// suspend (held: no agent runs here), suspend again (30002), resume.
	if out := ok(t, s.ctl(t, "tasks", "suspend", loop[0], "--reason", "maintenance")).stdout; out != loop[0]+" suspended\n" {
		t.Errorf("suspend printed %q", out)
	}
	fails(t, s.ctl(t, "tasks", "suspend", loop[0]), "(code 30002 immutable)")
	if out := ok(t, s.ctl(t, "tasks", "resume", loop[0])).stdout; out != loop[0]+" pending\n" {
		t.Errorf("resume printed %q", out)
	}
	fails(t, s.ctl(t, "tasks", "resume", loop[0]), "(code 30002 immutable)")

	// cancel, then cancel again (final tasks cannot change), retry, delete.
	if out := ok(t, s.ctl(t, "tasks", "cancel", loop[0], "--reason", "not today")).stdout; out != loop[0]+" cancelled\n" {
		t.Errorf("cancel printed %q", out)
	}
	fails(t, s.ctl(t, "tasks", "cancel", loop[0]), "(code 30002 immutable)")
	waitFor(t, 30*time.Second, "list --status cancelled", func() bool {
		return slices.Equal(s.listIDs(t, "--status", "cancelled"), loop)
	})
	if out := ok(t, s.ctl(t, "tasks", "retry", loop[0])).stdout; out != loop[0]+" pending\n" {
		t.Errorf("retry printed %q", out)
	}
	// Only failed or cancelled tasks can be retried.
	fails(t, s.ctl(t, "tasks", "retry", fromStdin[0]), "(code 30002 immutable)")
	if out := ok(t, s.ctl(t, "tasks", "delete", loop[0])).stdout; out != loop[0]+" deleted\n" {
		t.Errorf("delete printed %q", out)
	}
	fails(t, s.ctl(t, "tasks", "get", loop[0]), "(code 30004 not found)")
	fails(t, s.ctl(t, "tasks", "get", "no-such-task"), "(code 30004 not found)")

	// A spec the server refuses names the file and line.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("task:\n  name: odd-mode\n  command: c\n  distribution: {mode: sometimes}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, s.ctl(t, "tasks", "submit", "-f", bad), "(code 30005 invalid argument)")
	if r := s.ctl(t, "tasks", "submit", "-f", bad); !strings.Contains(r.stderr, "error: "+bad+":2: ") {
		t.Errorf("the error does not name the file: %q", r.stderr)
	}

	// The settings can come from a private config file instead.
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("server: "+s.gw.GRPCAddr()+"\napi_key: "+s.apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := ok(t, testApp().run(t, "", "tasks", "get", single[0], "--config", cfg)); !strings.Contains(r.stdout, "pytorch-train") {
		t.Errorf("get through the config file: %q", r.stdout)
	}
}

// background runs a ctl command in a goroutine; its output can be read
// while it runs and its exit code arrives on the channel.
func (s *stack) background(t *testing.T, stdin string, args ...string) (out, errOut *logbuf.Buffer, done <-chan int) {
	t.Helper()
	out, errOut = &logbuf.Buffer{}, &logbuf.Buffer{}
	ch := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	a := testApp(EnvServer, s.gw.GRPCAddr(), EnvAPIKey, s.apiKey)
	go func() { ch <- a.main(ctx, args, strings.NewReader(stdin), out, errOut) }()
	return out, errOut, ch
}

func exitCode(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(time.Minute):
		t.Fatal("the command did not finish")
		return -1
	}
}

// claim plays agent-001 on machine gpu-01: it leases the next task.
func (s *stack) claim(t *testing.T, wantID string) *taskv1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.lease.ClaimTasks(ctx, &taskv1.ClaimTasksRequest{AgentId: agentID, MachineId: "gpu-01", Limit: 1,
		Wait: durationpb.New(20 * time.Second)})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(resp.GetTasks()) != 1 || resp.GetTasks()[0].GetId() != wantID {
		t.Fatalf("claimed %v, want %s", resp.GetTasks(), wantID)
	}
	task := resp.GetTasks()[0]
	if _, err := s.lease.StartTask(ctx, &taskv1.StartTaskRequest{TaskId: wantID, AgentId: agentID, AttemptId: task.GetAttemptId()}); err != nil {
		t.Fatalf("start: %v", err)
	}
	return task
}

func (s *stack) submitOne(t *testing.T, taskJSON string) string {
	t.Helper()
	ids := lines(ok(t, s.ctlStdin(t, taskJSON, "tasks", "submit", "-f", "-")).stdout)
	if len(ids) != 1 {
		t.Fatalf("submit printed %q", ids)
	}
	return ids[0]
}

// waitLine waits for a watch line containing want.
func waitLine(t *testing.T, out *logbuf.Buffer, want string) {
	t.Helper()
	waitFor(t, 30*time.Second, "watch to print "+want, func() bool { return strings.Contains(out.String(), want) })
}

// TestIntegrationWatchToCompletion watches a task while the test plays the
// agent through the LeaseService, then reads its inline result.
func TestIntegrationWatchToCompletion(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	id := s.submitOne(t, `{"task": {"id": "watch-me", "name": "train", "type": "script", "command": "train.sh", "max_retries": 0}}`)

	out, _, done := s.background(t, "", "tasks", "watch", id)
	waitLine(t, out, " pending 0%")
	task := s.claim(t, id)
	attempt := task.GetAttemptId()
	waitLine(t, out, " running 0% attempt="+attempt)
	for _, p := range []struct {
		pct int32
		msg string
	}{{25, "epoch 1/4"}, {75, "epoch 3/4"}} {
		if _, err := s.lease.ReportTaskProgress(ctx, &taskv1.ReportTaskProgressRequest{TaskId: id, AgentId: agentID,
			AttemptId: attempt, Progress: p.pct, Message: p.msg}); err != nil {
			t.Fatal(err)
		}
		waitLine(t, out, " running "+strconv.Itoa(int(p.pct))+"% attempt="+attempt+` message="`+p.msg+`"`)
	}
	if _, err := s.lease.CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: id, AgentId: agentID, AttemptId: attempt,
		ExitCode: 0, Stdout: "loss=0.12\n", Stderr: "warning: slow disk\n"}); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, done); code != 0 {
		t.Fatalf("watch exited %d:\n%s", code, out.String())
	}

	// Each change once, in order; the timestamps differ run to run.
	var got []string
	for _, l := range lines(out.String()) {
		got = append(got, strings.SplitN(l, " ", 2)[1])
	}
	want := []string{
		"pending 0%",
		"running 0% attempt=" + attempt,
		"running 25% attempt=" + attempt + ` message="epoch 1/4"`,
		"running 75% attempt=" + attempt + ` message="epoch 3/4"`,
	}
	// assigned may be too brief to be seen before start.
	got = slices.DeleteFunc(got, func(l string) bool { return l == "assigned 0% attempt="+attempt })
	if len(got) != len(want)+1 || !slices.Equal(got[:len(want)], want) || !strings.HasPrefix(got[len(want)], "completed ") ||
		!strings.Contains(got[len(want)], "exit_code=0") {
		t.Errorf("watch printed:\n%s\nwant:\n%s\ncompleted … exit_code=0", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Watching a final task prints its state and ends at once.
	again := ok(t, s.ctl(t, "tasks", "watch", id))
	if l := lines(again.stdout); len(l) != 1 || !strings.Contains(l[0], " completed ") {
		t.Errorf("watch of a completed task: %q", again.stdout)
	}

	// The inline result: stdout to stdout (or the file), stderr to stderr.
	res := ok(t, s.ctl(t, "tasks", "result", id))
	if res.stdout != "loss=0.12\n" || res.stderr != "warning: slow disk\n" {
		t.Errorf("result: stdout %q stderr %q", res.stdout, res.stderr)
	}
	path := filepath.Join(t.TempDir(), "out.txt")
	ok(t, s.ctl(t, "tasks", "result", id, "-o", path))
	if b, err := os.ReadFile(path); err != nil || string(b) != "loss=0.12\n" {
		t.Errorf("result file: %q %v", b, err)
	}
}

// submit --wait and watch exit 1 when the task fails or is cancelled.
func TestIntegrationWaitForFailureAndCancel(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	out, errOut, done := s.background(t, `{"task": {"id": "doomed", "name": "doomed", "type": "script", "command": "x", "max_retries": 0}}`,
		"tasks", "submit", "-f", "-", "--wait")
	waitFor(t, 30*time.Second, "submit to print the id", func() bool { return len(lines(out.String())) >= 1 })
	id := lines(out.String())[0]
	task := s.claim(t, id)
	if _, err := s.lease.CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: id, AgentId: agentID, AttemptId: task.GetAttemptId(),
		ExitCode: 2, Stderr: "boom\n"}); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, done); code != ExitError {
		t.Fatalf("submit --wait exited %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if last := lines(out.String()); !strings.Contains(last[len(last)-1], " failed ") || !strings.Contains(last[len(last)-1], "exit_code=2") {
		t.Errorf("submit --wait output:\n%s", out.String())
	}
	if !strings.HasPrefix(errOut.String(), "error: task "+id+" failed") {
		t.Errorf("stderr = %q", errOut.String())
	}
	res := ok(t, s.ctl(t, "tasks", "result", id))
	if res.stdout != "" || !strings.Contains(res.stderr, "boom") || !strings.Contains(res.stderr, "note: task "+id+" is failed (exit code 2)") {
		t.Errorf("result of the failed task: stdout %q stderr %q", res.stdout, res.stderr)
	}

	// A watched task cancelled by someone else.
	other := s.submitOne(t, `{"task": {"name": "victim", "type": "script", "command": "x"}}`)
	wout, werr, wdone := s.background(t, "", "tasks", "watch", other)
	waitLine(t, wout, " pending 0%")
	ok(t, s.ctl(t, "tasks", "cancel", other, "--reason", "operator said so"))
	if code := exitCode(t, wdone); code != ExitError {
		t.Fatalf("watch exited %d", code)
	}
	if !strings.HasPrefix(werr.String(), "error: task "+other+" cancelled") {
		t.Errorf("watch stderr = %q", werr.String())
	}
	fails(t, s.ctl(t, "tasks", "result", s.submitOne(t, `{"task": {"name": "later", "type": "script", "command": "x"}}`)),
		"has no result yet (status pending)")
}

// A result too large for the database is downloaded from the object store
// through its presigned link, checked against its SHA-256 and unwrapped.
func TestIntegrationResultFromObjectStore(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	id := s.submitOne(t, `{"task": {"id": "big", "name": "big", "type": "script", "command": "x"}}`)
	task := s.claim(t, id)
	stdout := strings.Repeat("0123456789abcdef", 8192)
	body := []byte(`{"stdout":"` + stdout + `","stderr":""}`)
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	up, err := s.lease.CreateResultUpload(ctx, &taskv1.CreateResultUploadRequest{TaskId: id, AgentId: agentID,
		AttemptId: task.GetAttemptId(), SizeBytes: int64(len(body)), Sha256: digest, ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, up.GetUploadUrl(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	for k, v := range up.GetHeaders() {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("upload: %s", resp.Status)
	}
	if _, err := s.lease.CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: id, AgentId: agentID, AttemptId: task.GetAttemptId(),
		ResultObject: &taskv1.ResultObject{Key: up.GetObjectKey(), SizeBytes: int64(len(body)), Sha256: digest}}); err != nil {
		t.Fatal(err)
	}

	// The task's stdout, as for an inline result; --raw gives the object.
	if r := ok(t, s.ctl(t, "tasks", "result", id)); r.stdout != stdout {
		t.Errorf("result to stdout: %d bytes, want %d", len(r.stdout), len(stdout))
	}
	if r := ok(t, s.ctl(t, "tasks", "result", id, "--raw")); r.stdout != string(body) {
		t.Errorf("raw result to stdout: %d bytes, want %d", len(r.stdout), len(body))
	}
	path := filepath.Join(t.TempDir(), "result.json")
	ok(t, s.ctl(t, "tasks", "result", id, "-o", path, "--raw"))
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, body) {
		t.Errorf("result file: %d bytes, %v", len(b), err)
	}
}

// A wrong key is refused by the gateway: one error line, exit 1.
func TestIntegrationWrongKey(t *testing.T) {
	s := newStack(t)
	addr := s.gw.GRPCAddr()
	tests := []struct {
		name, key, want string
	}{
		{"unknown key", "tm_nosuchkey_0123456789abcdef0123456789abcdef", "(code 401 unauthenticated)"},
		{"malformed key", "garbage", "(code 401 unauthenticated)"},
		{"agent token instead of an API key", s.agentSecret, "(code 403 permission denied)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testApp(EnvServer, addr, EnvAPIKey, tt.key).run(t, "", "tasks", "list")
			fails(t, r, tt.want)
			if len(lines(r.stderr)) != 1 || r.stdout != "" {
				t.Errorf("stdout %q stderr %q, want one error line only", r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr, tt.key) {
				t.Errorf("the error shows the key: %q", r.stderr)
			}
		})
	}
	// The right key works, and an unreachable server is an error too.
	ok(t, s.ctl(t, "tasks", "list"))
	fails(t, testApp(EnvAPIKey, s.apiKey).run(t, "", "tasks", "list", "--server", "127.0.0.1:1"),
		"cannot reach 127.0.0.1:1")
}

// cutter is a TCP proxy to the gateway whose connections the test can cut,
// as a network failure or a load balancer restart would.
type cutter struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{lis: lis, target: target}
	t.Cleanup(func() { lis.Close(); c.cut() })
	go c.serve()
	return c
}

func (c *cutter) serve() {
	for {
		client, err := c.lis.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			client.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, client, server)
		c.mu.Unlock()
		go func() { io.Copy(server, client); server.Close() }()
		go func() { io.Copy(client, server); client.Close() }()
	}
}

// cut closes every open connection.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestIntegrationWatchSurvivesBrokenConnection: the watch's connection is
// cut twice mid-task; it re-issues WatchTask each time and prints every
// change once.
func TestIntegrationWatchSurvivesBrokenConnection(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	proxy := newCutter(t, s.gw.GRPCAddr())
	id := s.submitOne(t, `{"task": {"name": "flaky-network", "type": "script", "command": "x"}}`)

	out, errOut := &logbuf.Buffer{}, &logbuf.Buffer{}
	done := make(chan int, 1)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	a := testApp(EnvServer, proxy.lis.Addr().String(), EnvAPIKey, s.apiKey)
	go func() { done <- a.main(wctx, []string{"tasks", "watch", id}, strings.NewReader(""), out, errOut) }()

	waitLine(t, out, " pending 0%")
	task := s.claim(t, id)
	attempt := task.GetAttemptId()
	waitLine(t, out, " running 0% attempt="+attempt)

	report := func(pct int32) {
		t.Helper()
		if _, err := s.lease.ReportTaskProgress(ctx, &taskv1.ReportTaskProgressRequest{TaskId: id, AgentId: agentID,
			AttemptId: attempt, Progress: pct}); err != nil {
			t.Fatal(err)
		}
	}
	proxy.cut()
	report(30) // happens while the watch is disconnected
	waitLine(t, out, " running 30% attempt="+attempt)
	proxy.cut()
	report(60)
	waitLine(t, out, " running 60% attempt="+attempt)
	if _, err := s.lease.CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: id, AgentId: agentID, AttemptId: attempt}); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, done); code != 0 {
		t.Fatalf("watch exited %d\n%s\n%s", code, out.String(), errOut.String())
	}
	got := lines(out.String())
	seen := map[string]bool{}
	for _, l := range got {
		change := strings.SplitN(l, " ", 2)[1]
		if seen[change] {
			t.Errorf("printed twice: %q\n%s", change, out.String())
		}
		seen[change] = true
	}
	if !strings.Contains(got[len(got)-1], " completed ") {
		t.Errorf("last line %q", got[len(got)-1])
	}
	if n := strings.Count(errOut.String(), "reconnecting"); n < 2 {
		t.Errorf("stderr shows %d reconnects, want at least 2:\n%s", n, errOut.String())
	}
}
