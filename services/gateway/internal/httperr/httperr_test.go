package httperr

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

func withInfo(c codes.Code, msg string, info *errdetails.ErrorInfo) *status.Status {
	st, err := status.New(c, msg).WithDetails(info)
	if err != nil {
		panic(err)
	}
	return st
}

func TestFromStatus(t *testing.T) {
	code := func(c string) *errdetails.ErrorInfo {
		return &errdetails.ErrorInfo{Domain: Domain, Reason: "X", Metadata: map[string]string{"code": c}}
	}
	tests := []struct {
		name        string
		st          *status.Status
		wantStatus  int
		wantCode    int
		wantMessage string
	}{
		// Business codes from ErrorInfo decide, whatever the gRPC code.
		{"30001", withInfo(codes.Aborted, "attempt mismatch", code("30001")), 409, 30001, "attempt mismatch"},
		{"30002", withInfo(codes.FailedPrecondition, "task is completed", code("30002")), 409, 30002, "task is completed"},
		{"30003", withInfo(codes.FailedPrecondition, "lease expired", code("30003")), 410, 30003, "lease expired"},
		{"30004", withInfo(codes.NotFound, "task not found", code("30004")), 404, 30004, "task not found"},
		{"30005", withInfo(codes.InvalidArgument, "priority: must be 1-10", code("30005")), 400, 30005, "priority: must be 1-10"},
		// The quota service names the GU check's errors by reason only.
		{"GU_QUOTA_NOT_EXISTS", withInfo(codes.NotFound, "GU_QUOTA_NOT_EXISTS: no GU quota gu-1",
			&errdetails.ErrorInfo{Domain: Domain, Reason: "GU_QUOTA_NOT_EXISTS"}), 400, 30010, "GU_QUOTA_NOT_EXISTS: no GU quota gu-1"},
		{"GU_QUOTA_CREATING", withInfo(codes.FailedPrecondition, "GU_QUOTA_CREATING: WorkGroup is Creating",
			&errdetails.ErrorInfo{Domain: Domain, Reason: "GU_QUOTA_CREATING"}), 409, 30011, "GU_QUOTA_CREATING: WorkGroup is Creating"},
		// The quota service's own codes.
		{"31003", withInfo(codes.FailedPrecondition, "2 free GPUs", code("31003")), 409, 31003, "2 free GPUs"},
		{"31005", withInfo(codes.AlreadyExists, "quota gu1 exists", code("31005")), 409, 31005, "quota gu1 exists"},
		{"30099 hides its message", withInfo(codes.Internal, "pq: relation tasks does not exist", code("30099")), 500, 30099, "internal error"},
		{"code wins over gRPC code", withInfo(codes.Unknown, "lease expired", code("30003")), 410, 30003, "lease expired"},
		{"reason without metadata", withInfo(codes.Aborted, "m", &errdetails.ErrorInfo{Domain: Domain, Reason: "LEASE_EXPIRED"}), 410, 30003, "m"},
		{"unknown business code keeps gRPC status", withInfo(codes.FailedPrecondition, "gu quota creating", code("40002")), 409, 40002, "gu quota creating"},
		{"foreign domain is ignored", withInfo(codes.NotFound, "nope", &errdetails.ErrorInfo{Domain: "googleapis.com", Metadata: map[string]string{"code": "30001"}}), 404, 30004, "nope"},
		// Fallbacks by gRPC code.
		{"InvalidArgument", status.New(codes.InvalidArgument, "bad"), 400, 30005, "bad"},
		{"NotFound", status.New(codes.NotFound, "no task"), 404, 30004, "no task"},
		{"Aborted", status.New(codes.Aborted, "stale"), 409, 30001, "stale"},
		{"FailedPrecondition", status.New(codes.FailedPrecondition, "final"), 409, 30002, "final"},
		{"Unauthenticated", status.New(codes.Unauthenticated, "who"), 401, 401, "who"},
		{"PermissionDenied", status.New(codes.PermissionDenied, "no"), 403, 403, "no"},
		{"ResourceExhausted", status.New(codes.ResourceExhausted, "slow down"), 429, 429, "slow down"},
		{"AlreadyExists", status.New(codes.AlreadyExists, "tenant \"a\" exists"), 409, 409, "tenant \"a\" exists"},
		{"Unavailable", status.New(codes.Unavailable, "dial tcp 10.0.0.3:9000: refused"), 503, 30099, "service unavailable"},
		{"Internal", status.New(codes.Internal, "nil pointer"), 500, 30099, "internal error"},
		{"Unknown", status.New(codes.Unknown, "boom"), 500, 30099, "internal error"},
		{"DeadlineExceeded", status.New(codes.DeadlineExceeded, "slow"), 500, 30099, "internal error"},
		{"Unimplemented", status.New(codes.Unimplemented, "nope"), 500, 30099, "internal error"},
	}
	for _, tt := range tests {
		got := FromStatus(tt.st)
		if got.HTTPStatus != tt.wantStatus || got.Code != tt.wantCode || got.Message != tt.wantMessage {
			t.Errorf("%s: FromStatus = %d/%d %q, want %d/%d %q", tt.name, got.HTTPStatus, got.Code, got.Message, tt.wantStatus, tt.wantCode, tt.wantMessage)
		}
		if got.Detail != tt.st.Message() {
			t.Errorf("%s: Detail = %q, want the original message", tt.name, got.Detail)
		}
	}
	if got := FromError(errors.New("plain")); got.HTTPStatus != 500 || got.Code != 30099 || got.Message != "internal error" {
		t.Errorf("FromError(plain) = %+v", got)
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, New(http.StatusUnauthorized, CodeUnauthenticated, "missing bearer token"))
	if rec.Code != 401 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("WWW-Authenticate") == "" {
		t.Errorf("status %d, headers %v", rec.Code, rec.Header())
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 3 || body["code"] != float64(401) || body["message"] != "missing bearer token" || body["data"] != nil {
		t.Errorf("body = %s", rec.Body)
	}
	if _, ok := body["data"]; !ok {
		t.Error("data is missing, want null")
	}
}

func TestWriteForPicksTheEnvelopeOfTheAPI(t *testing.T) {
	tests := []struct {
		path     string
		p        Problem
		wantBody string
	}{
		{"/api/v1/tasks", New(401, CodeUnauthenticated, "missing bearer token"),
			`{"code":401,"message":"missing bearer token","data":null}`},
		{"/v1/video/generations", New(401, CodeUnauthenticated, "missing bearer token"),
			`{"code":"InvalidApiKey","message":"Invalid API-key provided.","request_id":"req-1"}`},
		{"/api/v1/video/generations/tasks/x", New(429, CodeTooManyRequests, "rate limit exceeded"),
			`{"code":"Throttling","message":"rate limit exceeded","request_id":"req-1"}`},
		{"/v1/video/generations/x", Problem{HTTPStatus: 409, VideoCode: "TaskRunning", Message: "running"},
			`{"code":"TaskRunning","message":"running","request_id":"req-1"}`},
		{"/v1/video/generations", New(500, CodeInternal, "internal error"),
			`{"code":"InternalError","message":"internal error","request_id":"req-1"}`},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, tt.path, nil)
		r = r.WithContext(requestid.NewContext(r.Context(), "req-1"))
		w := httptest.NewRecorder()
		WriteFor(w, r, tt.p)
		if w.Code != tt.p.HTTPStatus || w.Body.String() != tt.wantBody+"\n" {
			t.Errorf("%s: %d %s, want %d %s", tt.path, w.Code, w.Body, tt.p.HTTPStatus, tt.wantBody)
		}
	}
}

func TestVideoCodeFromStatusReachesTheVideoBody(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "the task is running").WithDetails(&errdetails.ErrorInfo{Domain: Domain,
		Reason: "TASK_IMMUTABLE", Metadata: map[string]string{"code": "30002", "video_code": VideoTaskRunning}})
	if err != nil {
		t.Fatal(err)
	}
	p := FromStatus(st)
	if p.HTTPStatus != http.StatusConflict || p.VideoCode != VideoTaskRunning {
		t.Fatalf("problem = %+v", p)
	}
	rec := httptest.NewRecorder()
	WriteFor(rec, httptest.NewRequest(http.MethodDelete, "/api/v1/video/generations/x", nil), p)
	var body VideoEnvelope
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusConflict || body.Code != VideoTaskRunning {
		t.Errorf("video body = %d %s", rec.Code, rec.Body)
	}
	// The task API's envelope keeps its numeric code.
	rec = httptest.NewRecorder()
	WriteFor(rec, httptest.NewRequest(http.MethodDelete, "/api/v1/tasks/x", nil), p)
	var env Envelope
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Code != CodeTaskImmutable {
		t.Errorf("task body = %s", rec.Body)
	}
}
