package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

var (
	assignedAt = time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)
	leaseUntil = time.Date(2026, 2, 5, 12, 5, 0, 0, time.UTC)
)

// claimedTask is a leased task as ClaimTasks answers it
// (docs/api/tasks.md#taskmeshtaskv1leaseservice).
func claimedTask() *taskv1.Task {
	return &taskv1.Task{
		Id:              "task-001",
		Command:         "python",
		Args:            []string{"train.py"},
		Priority:        3,
		Status:          "assigned",
		AssignedAgentId: "agent-001",
		AssignedAt:      timestamppb.New(assignedAt),
		LeaseExpiresAt:  timestamppb.New(leaseUntil),
		AttemptId:       "attempt-uuid-1",
	}
}

func TestRESTClaimAnswer(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("ClaimTasks", &taskv1.ClaimTasksResponse{Tasks: []*taskv1.Task{claimedTask()}, RequestId: "req-uuid-1"})
	r := e.do(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if got := r.header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	body := r.json(t)
	tasks, ok := body["tasks"].([]any)
	if !ok || len(tasks) != 1 {
		t.Fatalf("body = %s, want {\"tasks\":[…]}", r.body)
	}
	task := tasks[0].(map[string]any)
	want := map[string]any{
		"id": "task-001", "command": "python", "args": []any{"train.py"}, "priority": float64(3),
		"status": "assigned", "assigned_agent_id": "agent-001", "assigned_at": "2026-02-05T12:00:00Z",
		"lease_expires_at": "2026-02-05T12:05:00Z", "attempt_id": "attempt-uuid-1",
	}
	for k, v := range want {
		if got, _ := json.Marshal(task[k]); string(got) != mustJSON(v) {
			t.Errorf("tasks[0].%s = %s, want %s", k, got, mustJSON(v))
		}
	}
	// The request reached the scheduler decoded from snake_case.
	c, _ := e.fake.LastCall()
	wantReq := &taskv1.ClaimTasksRequest{AgentId: "agent-001", MachineId: "m-1", Limit: 1, RequestId: "req-uuid-1"}
	if !proto.Equal(c.Request, wantReq) {
		t.Errorf("scheduler got %v, want %v", c.Request, wantReq)
	}

	// Errors on agent routes are not cacheable either.
	e.fake.Fail("ClaimTasks", context.DeadlineExceeded)
	if r := e.do(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody); r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("error answer: Cache-Control = %q, want no-store", r.header.Get("Cache-Control"))
	}
	if r := e.do(t, "POST", "/api/v1/agent/tasks/claim", "", claimBody); r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("401 answer: Cache-Control = %q, want no-store", r.header.Get("Cache-Control"))
	}
}

func TestRESTTaskAnswerIsBareSnakeCase(t *testing.T) {
	e := newEnv(t)
	task := claimedTask()
	task.Status = "running"
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: task})
	r := e.do(t, "GET", "/api/v1/tasks/task-001", e.userSecret, "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	body := r.json(t)
	if _, wrapped := body["task"]; wrapped {
		t.Errorf("task is wrapped: %s", r.body)
	}
	if body["id"] != "task-001" || body["assigned_agent_id"] != "agent-001" || body["lease_expires_at"] != "2026-02-05T12:05:00Z" {
		t.Errorf("body = %s", r.body)
	}
	// Unset fields are present (EmitUnpopulated), with proto names only.
	for _, k := range []string{"stdout", "stderr", "retry_count", "machine_id", "depends_on", "started_at", "ended_at", "progress_message"} {
		if _, ok := body[k]; !ok {
			t.Errorf("field %q missing from %s", k, r.body)
		}
	}
	for k := range body {
		if regexp.MustCompile(`[A-Z]`).MatchString(k) {
			t.Errorf("field %q is not snake_case", k)
		}
	}
	if c, _ := e.fake.LastCall(); !proto.Equal(c.Request, &taskv1.GetTaskRequest{Id: "task-001"}) {
		t.Errorf("scheduler got %v", c.Request)
	}

	// Create: the body is the spec, the answer the bare first task.
	e.fake.Respond("CreateTask", &taskv1.CreateTaskResponse{Task: &taskv1.Task{Id: "task-9", Name: "train", Status: "pending"}, TaskIds: []string{"task-9"}})
	r = e.do(t, "POST", "/api/v1/tasks?request_id=idem-1", e.userSecret, `{"name":"train","command":"python","args":["train.py"],"priority":3,"max_retries":2}`)
	if r.status != 200 {
		t.Fatalf("create: status %d: %s", r.status, r.body)
	}
	if b := r.json(t); b["id"] != "task-9" || b["status"] != "pending" {
		t.Errorf("create answer = %s", r.body)
	}
	c, _ := e.fake.LastCall()
	req := c.Request.(*taskv1.CreateTaskRequest)
	if req.GetRequestId() != "idem-1" || req.GetSpec().GetName() != "train" || req.GetSpec().GetPriority() != 3 || req.GetSpec().GetMaxRetries() != 2 {
		t.Errorf("scheduler got %v", req)
	}
}

// TestRESTExitCodeIsNullUntilSet: a task without an outcome shows
// "exit_code": null (docs/api/tasks.md#task: int or null), not a missing
// key, on the task, in lists and in its result; once set it is the number,
// 0 included.
func TestRESTExitCodeIsNullUntilSet(t *testing.T) {
	e := newEnv(t)
	pending := &taskv1.Task{Id: "task-1", Name: "train", Status: "pending"}
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: pending})
	r := e.do(t, "GET", "/api/v1/tasks/task-1", e.userSecret, "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if v, ok := r.json(t)["exit_code"]; !ok || v != nil {
		t.Errorf("pending task: exit_code = %v (present %v), want null in %s", v, ok, r.body)
	}

	e.fake.Respond("ListTasks", &taskv1.ListTasksResponse{Tasks: []*taskv1.Task{pending}})
	r = e.do(t, "GET", "/api/v1/tasks", e.userSecret, "")
	if !strings.Contains(string(r.body), `"exit_code":null`) {
		t.Errorf("list: no \"exit_code\":null in %s", r.body)
	}

	e.fake.Respond("GetTaskResult", &taskv1.GetTaskResultResponse{Result: &taskv1.TaskResult{TaskId: "task-1", Status: "pending"}})
	r = e.do(t, "GET", "/api/v1/tasks/task-1/result", e.userSecret, "")
	if v, ok := r.json(t)["exit_code"]; !ok || v != nil {
		t.Errorf("result: exit_code = %v (present %v), want null in %s", v, ok, r.body)
	}

	zero := int32(0)
	done := &taskv1.Task{Id: "task-1", Name: "train", Status: "completed", ExitCode: &zero}
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: done})
	r = e.do(t, "GET", "/api/v1/tasks/task-1", e.userSecret, "")
	if v, ok := r.json(t)["exit_code"]; !ok || v != float64(0) {
		t.Errorf("completed task: exit_code = %v (present %v), want 0 in %s", v, ok, r.body)
	}
}

func TestRESTRequestID(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, sent string
		wantEcho   bool
	}{
		{name: "generated when absent"},
		{name: "echoed when sane", sent: "req-uuid-42", wantEcho: true},
		{name: "replaced when not sane", sent: "bad id\twith tab"},
		{name: "replaced when too long", sent: strings.Repeat("a", 200)},
	}
	generated := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			if tt.sent != "" {
				headers = []string{"X-Request-Id", tt.sent}
			}
			r := e.do(t, "GET", "/api/v1/tasks", e.userSecret, "", headers...)
			got := r.header.Get("X-Request-Id")
			switch {
			case tt.wantEcho && got != tt.sent:
				t.Errorf("X-Request-Id = %q, want %q echoed", got, tt.sent)
			case !tt.wantEcho && !generated.MatchString(got):
				t.Errorf("X-Request-Id = %q, want a generated id", got)
			}
			c, _ := e.fake.LastCall()
			if fwd := c.MD.Get("x-request-id"); len(fwd) != 1 || fwd[0] != got {
				t.Errorf("scheduler got x-request-id %q, want %q", fwd, got)
			}
		})
	}
	// Error answers carry it too.
	if r := e.do(t, "GET", "/api/v1/tasks", "", ""); !generated.MatchString(r.header.Get("X-Request-Id")) {
		t.Errorf("401 answer without X-Request-Id")
	}
}

func TestRESTTraceContextForwarded(t *testing.T) {
	e := newEnv(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	e.do(t, "GET", "/api/v1/tasks", e.userSecret, "",
		"Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01", "Tracestate", "vendor=x", "Baggage", "user=evil")
	c, _ := e.fake.LastCall()
	tp := c.MD.Get("traceparent")
	if len(tp) != 1 || !strings.HasPrefix(tp[0], "00-"+traceID+"-") {
		t.Errorf("traceparent = %q, want trace %s", tp, traceID)
	}
	if ts := c.MD.Get("tracestate"); len(ts) != 1 || ts[0] != "vendor=x" {
		t.Errorf("tracestate = %q", ts)
	}
	if b := c.MD.Get("baggage"); len(b) != 0 {
		t.Errorf("baggage %q reached the scheduler", b)
	}
}

func TestOpenAPIDocument(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", "/openapi.json", "", "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q", r.status, r.header.Get("Content-Type"))
	}
	var doc struct {
		Swagger             string
		SecurityDefinitions map[string]map[string]any `json:"securityDefinitions"`
		Security            []map[string][]string
		Definitions         map[string]struct {
			Properties map[string]struct {
				// Numbers for the task API's codes, strings for the video
				// API's.
				Enum []any
			}
		}
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Schema struct {
					Ref string `json:"$ref"`
				}
			}
		}
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("not valid JSON: %v", err)
	}
	if doc.Swagger != "2.0" {
		t.Errorf("swagger = %q", doc.Swagger)
	}
	if b := doc.SecurityDefinitions["bearer"]; b["type"] != "apiKey" || b["in"] != "header" || b["name"] != "Authorization" {
		t.Errorf("securityDefinitions.bearer = %v", b)
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearer"] == nil {
		t.Errorf("security = %v", doc.Security)
	}
	enum := doc.Definitions["ErrorEnvelope"].Properties["code"].Enum
	for _, want := range []int{30001, 30002, 30003, 30004, 30005, 30099, 401, 403, 429} {
		found := false
		for _, c := range enum {
			found = found || c == float64(want)
		}
		if !found {
			t.Errorf("ErrorEnvelope code enum %v lacks %d", enum, want)
		}
	}
	videoEnum := doc.Definitions["VideoErrorEnvelope"].Properties["code"].Enum
	for _, want := range []string{"InvalidParameter", "InvalidApiKey", "AccessDenied", "UnsupportedOperation.TaskRunning",
		"UnsupportedOperation.TaskCanceled", "Throttling", "InternalError"} {
		found := false
		for _, c := range videoEnum {
			found = found || c == want
		}
		if !found {
			t.Errorf("VideoErrorEnvelope code enum %v lacks %s", videoEnum, want)
		}
	}
	for _, status := range []string{"400", "401", "403", "409", "429", "500"} {
		if r := doc.Paths["/api/v1/video/generations/{task_id}"]["delete"].Responses[status]; r.Schema.Ref != "#/definitions/VideoErrorEnvelope" {
			t.Errorf("video DELETE lacks the %s error response", status)
		}
	}
	claim := doc.Paths["/api/v1/agent/tasks/claim"]["post"].Responses
	getTask := doc.Paths["/api/v1/tasks/{id}"]["get"].Responses
	for _, status := range []string{"400", "401", "403", "404", "409", "410", "429", "500", "503"} {
		if claim[status].Schema.Ref != "#/definitions/ErrorEnvelope" {
			t.Errorf("claim lacks the %s error response", status)
		}
	}
	for _, status := range []string{"401", "403", "404", "409", "429", "500"} {
		if getTask[status].Schema.Ref != "#/definitions/ErrorEnvelope" {
			t.Errorf("GET task lacks the %s error response", status)
		}
	}
	if _, ok := getTask["410"]; ok {
		t.Error("GET task documents 410, which only lease routes answer")
	}
	if _, ok := getTask["200"]; !ok {
		t.Error("the generated 200 response was lost")
	}
	// The hand-written live stream routes are documented like the others.
	events := doc.Paths["/api/v1/tasks/{task_id}/events"]["get"].Responses
	ws := doc.Paths["/api/v1/tasks/{task_id}/ws"]["get"].Responses
	_, upgrade := ws["101"] // a message wrapping the frame (the e2e conformance test reads one)
	if events["200"].Schema.Ref != "#/definitions/liveTaskFrame" || !upgrade ||
		events["404"].Schema.Ref != "#/definitions/ErrorEnvelope" || ws["429"].Schema.Ref != "#/definitions/ErrorEnvelope" {
		t.Errorf("live routes: events %v, ws %v", events, ws)
	}
	if _, ok := doc.Definitions["liveTaskFrame"].Properties["progress_message"]; !ok {
		t.Error("no liveTaskFrame definition")
	}
}

// Without Kafka brokers the live stream routes answer 503 with the
// envelope; polling is unaffected.
func TestLiveStreamsNeedKafka(t *testing.T) {
	e := newEnv(t)
	assertEnvelope(t, e.do(t, "GET", "/api/v1/tasks/t1/events", e.userSecret, ""), 503, 30099, "")
	assertEnvelope(t, e.do(t, "GET", "/api/v1/tasks/t1/events", "", ""), 401, 401, "")
}

func TestHealthzAndObjects(t *testing.T) {
	objects := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("object " + r.URL.Path + "?" + r.URL.RawQuery))
	})
	e := newEnv(t, withObjects(objects))
	r := e.do(t, "GET", "/healthz", "", "")
	if r.status != 200 || r.json(t)["status"] != "ok" {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	// Objects need no bearer (the URL is signed) and see the full path.
	r = e.do(t, "GET", "/objects/results/t1.bin?sig=abc", "", "")
	if r.status != 200 || string(r.body) != "object /objects/results/t1.bin?sig=abc" {
		t.Errorf("objects: %d %s", r.status, r.body)
	}
	// Without an object handler the path is an ordinary unknown route.
	e2 := newEnv(t)
	assertEnvelope(t, e2.do(t, "GET", "/objects/x", "", ""), 404, 404, "")
}

// GET /api/v1/tasks reads created_after and created_before as dates too
// (docs/api/tasks.md, ListTasks): the scheduler gets the times they mean,
// created_before=D being the start of the next day (D included, as the
// audit log's to=D); an RFC 3339 time goes on as itself, an empty value
// is no bound, and anything else is 30005 naming the parameter before the
// scheduler sees it.
func TestRESTListTasksReadsDateBounds(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("ListTasks", &taskv1.ListTasksResponse{})
	day := func(y int, m time.Month, d int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
	}
	for query, want := range map[string]*taskv1.ListTasksRequest{
		"created_after=2024-01-01&created_before=2024-01-31": {CreatedAfter: day(2024, 1, 1), CreatedBefore: day(2024, 2, 1)},
		"createdAfter=2024-02-29&createdBefore=2024-12-31":   {CreatedAfter: day(2024, 2, 29), CreatedBefore: day(2025, 1, 1)},
		"created_before=2024-01-31T12%3A00%3A00%2B08%3A00":   {CreatedBefore: timestamppb.New(time.Date(2024, 1, 31, 4, 0, 0, 0, time.UTC))},
		"created_before=2024-01-31T12:00:00+08:00":           {CreatedBefore: timestamppb.New(time.Date(2024, 1, 31, 4, 0, 0, 0, time.UTC))},
		"created_after=2024-01-01T00:00:00.5Z&type=python":   {CreatedAfter: timestamppb.New(time.Date(2024, 1, 1, 0, 0, 0, 5e8, time.UTC)), Type: "python"},
		"created_after=&created_before=&status=pending":      {Status: "pending"},
	} {
		e.fake.Reset()
		e.fake.Respond("ListTasks", &taskv1.ListTasksResponse{})
		r := e.do(t, "GET", "/api/v1/tasks?"+query, e.userSecret, "")
		c, ok := e.fake.LastCall()
		if r.status != 200 || !ok || !proto.Equal(c.Request, want) {
			t.Errorf("?%s: %d %s, scheduler got %v, want %v", query, r.status, r.body, c.Request, want)
		}
	}
	for query, param := range map[string]string{
		"created_after=2024-13-01":                   "created_after",
		"created_before=tomorrow":                    "created_before",
		"created_after=2024-01-01&created_before=x":  "created_before",
		"createdBefore=2024-01-31+10:00":             "createdBefore",
		"created_after=2024-01-01&created_after=bad": "created_after",
	} {
		e.fake.Reset()
		r := e.do(t, "GET", "/api/v1/tasks?"+query, e.userSecret, "")
		body := r.json(t)
		if r.status != 400 || body["code"] != float64(30005) || !strings.HasPrefix(fmt.Sprint(body["message"]), param+" ") {
			t.Errorf("?%s: %d %s, want 400 30005 naming %s", query, r.status, r.body, param)
		}
		if _, called := e.fake.LastCall(); called {
			t.Errorf("?%s reached the scheduler", query)
		}
	}
}

// A create body may be the task as the API shows it: the server's own
// fields (status, retry_count, the attempt, the timestamps, the outcome)
// are left out before the spec is read, in the flat form and in the task
// file's form alike. A key of neither a Task nor a TaskSpec is still
// 30005 and creates nothing.
func TestRESTCreateLeavesOutTheServersFields(t *testing.T) {
	e := newEnv(t)
	e.fake.Respond("CreateTask", &taskv1.CreateTaskResponse{Task: &taskv1.Task{Id: "task-9", Name: "train", Status: "pending"}, TaskIds: []string{"task-9"}})
	asRead := `"name":"train","command":"python","args":["train.py"],"priority":3,"max_retries":2,"retry_count":0,"retry_delay":60,` +
		`"status":"pending","exit_code":null,"stdout":"","stderr":"","error":null,"created_at":"2026-02-05T12:00:00Z",` +
		`"assigned_at":null,"started_at":null,"ended_at":null,"assigned_agent_id":"","lease_expires_at":null,"attempt_id":""`
	for _, body := range []string{"{" + asRead + "}", `{"task":{` + asRead + `}}`} {
		e.fake.Reset()
		r := e.do(t, "POST", "/api/v1/tasks", e.userSecret, body)
		if r.status != 200 {
			t.Fatalf("create with the server's fields: %d %s", r.status, r.body)
		}
		c, _ := e.fake.LastCall()
		spec := c.Request.(*taskv1.CreateTaskRequest).GetSpec()
		if spec.GetName() != "train" || spec.GetPriority() != 3 || spec.GetMaxRetries() != 2 || spec.GetRetryDelay() != 60 {
			t.Errorf("scheduler got %v, want the body's spec", spec)
		}
	}
	e.fake.Reset()
	r := e.do(t, "POST", "/api/v1/tasks", e.userSecret, `{"name":"t","command":"python","retry_count":0,"colour":"red"}`)
	if r.status != 400 || r.json(t)["code"] != float64(30005) || !strings.Contains(string(r.body), "colour") {
		t.Errorf("an unknown key beside the server's fields: %d %s, want 30005 naming it", r.status, r.body)
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %v, want nothing", calls)
	}
}
