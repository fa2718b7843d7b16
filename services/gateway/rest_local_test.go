package gateway_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

// A gateway beside its scheduler sends REST calls in-process
// (Config.SchedulerLocal); clients and the scheduler must not be able to
// tell: every answer, and every call the scheduler sees, is the one the
// network path gives.
func TestRESTInProcessAnswersAsOverTheNetwork(t *testing.T) {
	notFound := schedulertest.BusinessError(codes.NotFound, "task not found", taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND)
	cases := []struct {
		name, method, path, body string
		agent                    bool   // the agent token, else the API key
		upstream                 string // the fake's method, "" when none is called
		answer                   func(*schedulertest.Fake)
		status                   int
	}{
		{"get", "GET", "/api/v1/tasks/task-001", "", false, "GetTask",
			func(f *schedulertest.Fake) { f.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()}) }, 200},
		{"create", "POST", "/api/v1/tasks", `{"name":"n","command":"true","priority":3}`, false, "CreateTask",
			func(f *schedulertest.Fake) { f.Respond("CreateTask", &taskv1.CreateTaskResponse{Task: claimedTask()}) }, 200},
		{"business error", "GET", "/api/v1/tasks/gone", "", false, "GetTask",
			func(f *schedulertest.Fake) { f.Fail("GetTask", notFound) }, 404},
		{"unavailable", "GET", "/api/v1/tasks/task-001", "", false, "GetTask",
			func(f *schedulertest.Fake) { f.Fail("GetTask", status.Error(codes.Unavailable, "database down")) }, 503},
		{"plain error", "GET", "/api/v1/tasks/task-001", "", false, "GetTask",
			func(f *schedulertest.Fake) {
				f.Handle("GetTask", func(context.Context, proto.Message) (proto.Message, error) { return nil, errors.New("boom") })
			}, 500},
		{"agent claim", "POST", "/api/v1/agent/tasks/claim", claimBody, true, "ClaimTasks",
			func(f *schedulertest.Fake) {
				f.Respond("ClaimTasks", &taskv1.ClaimTasksResponse{Tasks: []*taskv1.Task{claimedTask()}, RequestId: "req-uuid-1"})
			}, 200},
		{"agent on a user route", "GET", "/api/v1/tasks/task-001", "", true, "", func(*schedulertest.Fake) {}, 403},
	}
	network, local := newEnv(t), newEnv(t, withLocalScheduler())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var answers [2]response
			var calls [2][]schedulertest.Call
			for i, e := range []*env{network, local} {
				e.fake.Reset()
				tc.answer(e.fake)
				bearer := e.userSecret
				if tc.agent {
					bearer = e.agentSec
				}
				answers[i], calls[i] = e.do(t, tc.method, tc.path, bearer, tc.body), e.fake.Calls()
			}
			if answers[1].status != tc.status {
				t.Fatalf("in-process: status %d, want %d: %s", answers[1].status, tc.status, answers[1].body)
			}
			if answers[0].status != answers[1].status || string(answers[0].body) != string(answers[1].body) ||
				answers[0].header.Get("Content-Type") != answers[1].header.Get("Content-Type") {
				t.Errorf("network: %d %s\nin-process: %d %s", answers[0].status, answers[0].body, answers[1].status, answers[1].body)
			}
			if tc.upstream == "" {
				if len(calls[1]) != 0 {
					t.Errorf("in-process: the scheduler was called: %+v", calls[1])
				}
				return
			}
			if len(calls[0]) != 1 || len(calls[1]) != 1 {
				t.Fatalf("calls: network %d, in-process %d; want 1 each", len(calls[0]), len(calls[1]))
			}
			n, l := calls[0][0], calls[1][0]
			if !l.InProcess || n.InProcess {
				t.Errorf("InProcess: network %v, in-process %v", n.InProcess, l.InProcess)
			}
			if l.Method != tc.upstream || n.Method != l.Method || !proto.Equal(n.Request, l.Request) ||
				n.Principal.Kind != l.Principal.Kind || n.Principal.TenantID != l.Principal.TenantID {
				t.Errorf("network call %+v\nin-process call %+v", n, l)
			}
			if l.MD.Get("x-request-id")[0] != answers[1].header.Get("X-Request-Id") {
				t.Errorf("request id: metadata %v, answer %q", l.MD.Get("x-request-id"), answers[1].header.Get("X-Request-Id"))
			}
		})
	}
}
