package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

const completeBody = `{"agent_id":"agent-001","attempt_id":"attempt-1","exit_code":0}`

func TestRESTBusinessErrors(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name        string
		err         error
		wantStatus  int
		wantCode    int
		wantMessage string
	}{
		{"attempt mismatch", schedulertest.BusinessError(codes.Aborted, "attempt mismatch", taskv1.ErrorCode_ERROR_CODE_ATTEMPT_MISMATCH), 409, 30001, "attempt mismatch"},
		{"task immutable", schedulertest.BusinessError(codes.FailedPrecondition, "task is completed", taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE), 409, 30002, "task is completed"},
		{"lease expired", schedulertest.BusinessError(codes.FailedPrecondition, "lease expired", taskv1.ErrorCode_ERROR_CODE_LEASE_EXPIRED), 410, 30003, "lease expired"},
		{"task not found", schedulertest.BusinessError(codes.NotFound, "task not found", taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND), 404, 30004, "task not found"},
		{"invalid argument", schedulertest.BusinessError(codes.InvalidArgument, "exit_code required", taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT), 400, 30005, "exit_code required"},
		{"internal", schedulertest.BusinessError(codes.Internal, "relation tasks does not exist", taskv1.ErrorCode_ERROR_CODE_INTERNAL), 500, 30099, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.fake.Fail("CompleteTask", tt.err)
			r := e.do(t, "POST", "/api/v1/agent/tasks/task-001/complete", e.agentSec, completeBody)
			assertEnvelope(t, r, tt.wantStatus, tt.wantCode, tt.wantMessage)
		})
	}
	// The internal message is logged, not answered.
	if logs := e.logs.String(); !strings.Contains(logs, "relation tasks does not exist") {
		t.Error("the internal error's message was not logged")
	}
}

func TestRESTGRPCCodeFallbacks(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		code        codes.Code
		wantStatus  int
		wantCode    int
		wantMessage string
	}{
		{codes.InvalidArgument, 400, 30005, "bad field"},
		{codes.NotFound, 404, 30004, "bad field"},
		{codes.Aborted, 409, 30001, "bad field"},
		{codes.FailedPrecondition, 409, 30002, "bad field"},
		{codes.Unauthenticated, 401, 401, "bad field"},
		{codes.PermissionDenied, 403, 403, "bad field"},
		{codes.ResourceExhausted, 429, 429, "bad field"},
		{codes.Unavailable, 503, 30099, "service unavailable"},
		{codes.Internal, 500, 30099, "internal error"},
		{codes.Unknown, 500, 30099, "internal error"},
		{codes.DeadlineExceeded, 500, 30099, "internal error"},
		{codes.Unimplemented, 500, 30099, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			e.fake.Fail("GetTask", status.Error(tt.code, "bad field"))
			r := e.do(t, "GET", "/api/v1/tasks/task-001", e.userSecret, "")
			assertEnvelope(t, r, tt.wantStatus, tt.wantCode, tt.wantMessage)
		})
	}
}

func TestRESTMalformedBodies(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, method, path, bearer, body string
	}{
		{"malformed JSON", "POST", "/api/v1/agent/tasks/claim", "agent", `{"agent_id": "agent-001",`},
		{"not an object", "POST", "/api/v1/agent/tasks/claim", "agent", `[1,2]`},
		{"unknown field", "POST", "/api/v1/agent/tasks/claim", "agent", `{"agent_id":"agent-001","limitt":3}`},
		{"wrong type", "POST", "/api/v1/agent/tasks/claim", "agent", `{"agent_id":"agent-001","limit":"ten"}`},
		{"unknown field in task spec", "POST", "/api/v1/tasks", "user", `{"name":"t","command":"python","prioritee":3}`},
		{"camelCase is not the documented name", "POST", "/api/v1/agent/tasks/t1/complete", "agent", `{"agent_id":"a","attempt_id":"b","exitCode":0,"bogus":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.fake.Reset()
			bearer := e.userSecret
			if tt.bearer == "agent" {
				bearer = e.agentSec
			}
			r := e.do(t, tt.method, tt.path, bearer, tt.body)
			assertEnvelope(t, r, http.StatusBadRequest, 30005, "")
			if calls := e.fake.Calls(); len(calls) != 0 {
				t.Errorf("the scheduler got %d calls, want none", len(calls))
			}
		})
	}
}

func TestRESTRoutingErrors(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, method, path string
		bearer             bool
		wantStatus         int
		wantCode           int
		// wantAllow is the Allow header of a 405: HTTP requires it.
		wantAllow string
	}{
		{"unknown api route", "GET", "/api/v1/nothing", true, 404, 404, ""},
		{"unknown agent route", "POST", "/api/v1/agent/tasks/t1/strat", false, 404, 404, ""},
		{"wrong method", "DELETE", "/api/v1/tasks", true, 405, 405, "GET, POST"},
		{"wrong method on a task", "POST", "/api/v1/tasks/t1", true, 405, 405, "GET, PUT, DELETE"},
		{"wrong method on an agent route", "GET", "/api/v1/agent/tasks/claim", false, 405, 405, "POST"},
		{"outside the api", "GET", "/index.html", false, 404, 404, ""},
		{"post to healthz", "POST", "/healthz", false, 405, 405, "GET, HEAD"},
		{"post to openapi", "POST", "/openapi.json", false, 405, 405, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bearer := ""
			if tt.bearer {
				bearer = e.userSecret
			} else if tt.path[:min(len(tt.path), 14)] == "/api/v1/agent/" {
				bearer = e.agentSec
			}
			r := e.do(t, tt.method, tt.path, bearer, "")
			assertEnvelope(t, r, tt.wantStatus, tt.wantCode, "")
			if got := r.header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
		})
	}
	// The video API's routes answer 405 in their own body, with Allow too.
	for _, tt := range []struct{ method, path, allow string }{
		{"PUT", "/v1/video/generations", "POST"},
		{"POST", "/v1/video/generations/t1", "GET, DELETE"},
		{"PATCH", "/api/v1/video/generations/tasks/t1", "GET, DELETE"},
	} {
		r := e.do(t, tt.method, tt.path, e.userSecret, "")
		if body := r.json(t); r.status != 405 || body["code"] != "MethodNotAllowed" || r.header.Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d %v, Allow %q; want 405 MethodNotAllowed, Allow %q", tt.method, tt.path, r.status, body,
				r.header.Get("Allow"), tt.allow)
		}
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
}

// A path no route serves is 404 whoever calls — an operator key and an
// agent token too, which may call only some of the routes that exist —
// while a route that exists is still 403 to a kind that may not call it.
func TestRESTUnknownRouteIsNotFoundForEveryCaller(t *testing.T) {
	e := newEnv(t)
	admin := e.adminSecret(t)
	callers := map[string]string{"an API key": e.userSecret, "an agent token": e.agentSec, "an operator key": admin}
	for who, bearer := range callers {
		for _, path := range []string{"/api/v1/nonexistent", "/api/v1/tasks/t1/nothing", "/api/v1/agent/tasks/t1/strat",
			"/api/v1/admin/nothing"} {
			assertEnvelope(t, e.do(t, "GET", path, bearer, ""), 404, 404, "no route for GET "+path)
			if t.Failed() {
				t.Fatalf("%s calling GET %s", who, path)
			}
		}
	}
	for _, tt := range []struct{ who, bearer, method, path string }{
		{"an operator key", admin, "GET", "/api/v1/tasks/task-001"},
		{"an operator key", admin, "POST", "/api/v1/task-groups/g1/start"},
		{"an operator key", admin, "POST", "/api/v1/agent/tasks/claim"},
		{"an agent token", e.agentSec, "GET", "/api/v1/tasks"},
		{"an agent token", e.agentSec, "GET", "/api/v1/quotas"},
		{"an API key", e.userSecret, "GET", "/api/v1/admin/tenants"},
		{"an API key", e.userSecret, "POST", "/api/v1/agent/tasks/claim"},
	} {
		if r := e.do(t, tt.method, tt.path, tt.bearer, ""); r.status != 403 {
			t.Errorf("%s calling %s %s: %d %s, want 403", tt.who, tt.method, tt.path, r.status, r.body)
		}
	}
	assertEnvelope(t, e.do(t, "GET", "/api/v1/nonexistent", "", ""), 401, 401, "missing bearer token")
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
}

// A validation error names the fields of the body the client sent: on a
// route whose body is one field of the request (POST /api/v1/tasks: the
// request's spec), "spec.priority" is "priority"; on a route whose body
// is the whole request the paths are already the body's and stay as they
// are.
func TestRESTValidationErrorsNameTheBodysFields(t *testing.T) {
	e := newEnv(t)
	one := "validation error: spec.priority: must be greater than or equal to 1 and less than or equal to 10"
	e.fake.Fail("CreateTask", schedulertest.BusinessError(codes.InvalidArgument, one, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT))
	r := e.do(t, "POST", "/api/v1/tasks", e.userSecret, `{"name":"x","type":"shell","command":"true","priority":11}`)
	assertEnvelope(t, r, 400, 30005, "validation error: priority: must be greater than or equal to 1 and less than or equal to 10")

	several := "validation error:\n - spec.priority: must be <= 10\n - spec.env: spec.env keys must not be empty"
	e.fake.Fail("UpdateTask", schedulertest.BusinessError(codes.InvalidArgument, several, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT))
	r = e.do(t, "PUT", "/api/v1/tasks/task-1", e.userSecret, `{"priority":11}`)
	var got struct{ Message string }
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 400 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	// Each listed path loses its prefix; the description's own text is
	// left as written.
	if strings.Contains(got.Message, "- spec.") || !strings.Contains(got.Message, "priority: must be <= 10") ||
		!strings.Contains(got.Message, "env: spec.env keys must not be empty") {
		t.Errorf("PUT message %q: want the body's paths (priority, env) and the descriptions untouched", got.Message)
	}

	whole := "validation error: agent_id: value is required"
	e.fake.Fail("ClaimTasks", schedulertest.BusinessError(codes.InvalidArgument, whole, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT))
	r = e.do(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, `{"agent_id":"agent-001","limit":1}`)
	assertEnvelope(t, r, 400, 30005, whole)
}

// logLines counts the captured JSON log lines with message msg, by level.
func logLines(t *testing.T, logs, msg string) map[string]int {
	t.Helper()
	byLevel := map[string]int{}
	for _, rec := range logRecords(t, logs) {
		if rec.Msg == msg {
			byLevel[rec.Level]++
		}
	}
	return byLevel
}

type logRecord struct {
	Level, Msg string
	Repeated   *int
}

func logRecords(t *testing.T, logs string) []logRecord {
	t.Helper()
	var recs []logRecord
	for _, ln := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec logRecord
		if err := json.Unmarshal([]byte(ln), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, ln)
		}
		recs = append(recs, rec)
	}
	return recs
}

// checkFolded checks the captured log lines with message msg after a run
// of failures that met one outage, back to back: all at level, one line
// for the run's first failure, and the others folded into the lines of
// the windows that ended meanwhile (package logthrottle), each with how
// many it stands for, together no more than the failures (the last
// window may still be open). How many windows the run spans depends on
// the machine's speed, so the lines are counted by kind, not in all; a
// line per failure has as many first lines as failures.
func checkFolded(t *testing.T, logs, msg, level string, failures int) {
	t.Helper()
	first, windows, accounted := 0, 0, 0
	for _, rec := range logRecords(t, logs) {
		if rec.Msg != msg {
			continue
		}
		if rec.Level != level {
			t.Errorf("%q logged at %s, want %s", msg, rec.Level, level)
		}
		switch {
		case rec.Repeated == nil:
			first++
			accounted++
		case *rec.Repeated < 1:
			t.Errorf("%q: a window's line stands for %d repeats", msg, *rec.Repeated)
		default:
			windows++
			accounted += *rec.Repeated
		}
	}
	if first != 1 || accounted > failures {
		t.Errorf("%q: %d first lines and %d window lines, standing for %d, after %d failures; want one first line",
			msg, first, windows, accounted, failures)
	}
}

// TestAnUnavailableServiceIsOneWarningPerWindow: while the scheduler
// answers Unavailable (it or its database is down), every request gets its
// 503, and the logs get one warning for the window instead of an error
// per request. An internal error is still an error line each time.
func TestAnUnavailableServiceIsOneWarningPerWindow(t *testing.T) {
	e := newEnv(t)
	e.fake.Fail("GetTask", status.Error(codes.Unavailable, "service unavailable: the database cannot be reached; retry later"))
	for range 10 {
		r := e.do(t, "GET", "/api/v1/tasks/task-001", e.userSecret, "")
		assertEnvelope(t, r, 503, 30099, "service unavailable")
	}
	logs := e.logs.String()
	checkFolded(t, logs, "service unavailable", "WARN", 10)
	if got := logLines(t, logs, "internal service error"); len(got) != 0 {
		t.Errorf("internal service error lines by level = %v, want none for an outage", got)
	}

	e.fake.Fail("GetTask", status.Error(codes.Internal, "relation tasks does not exist"))
	for range 2 {
		e.do(t, "GET", "/api/v1/tasks/task-001", e.userSecret, "")
	}
	if got := logLines(t, e.logs.String(), "internal service error"); got["ERROR"] != 2 {
		t.Errorf("internal service error lines by level = %v, want an ERROR per internal error", got)
	}
}

// TestACredentialStoreOutageIsOneLinePerWindow: a key the gateway has not
// cached cannot be checked while its store fails; REST and gRPC answer
// each request with their 503, and each front door logs the failure once
// for the window.
func TestACredentialStoreOutageIsOneLinePerWindow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, fresh, err := e.creds.CreateAPIKey(ctx, "acme", "never-used", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `ALTER TABLE api_keys RENAME TO api_keys_away`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Exec(ctx, `ALTER TABLE api_keys_away RENAME TO api_keys`) })
	for range 10 {
		r := e.do(t, "GET", "/api/v1/tasks/task-001", fresh, "")
		assertEnvelope(t, r, 503, 30099, "credential store unavailable")
	}
	conn := e.dial(t)
	for range 5 {
		gctx, cancel := outgoing(fresh)
		_, err := taskv1.NewTaskServiceClient(conn).GetTask(gctx, &taskv1.GetTaskRequest{Id: "task-001"})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("gRPC GetTask during the outage: %v, want Unavailable", err)
		}
	}
	logs := e.logs.String()
	checkFolded(t, logs, "authenticating a request failed", "ERROR", 10)
	checkFolded(t, logs, "authenticating a grpc call failed", "ERROR", 5)
	for _, s := range []string{fresh, fresh[len(fresh)-43:]} {
		if strings.Contains(logs, s) {
			t.Error("the key's secret appears in the logs")
		}
	}
}
