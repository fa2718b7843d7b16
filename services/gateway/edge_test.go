package gateway_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	agentv1 "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// Bad input is refused at the edge in the route's envelope, and the
// scheduler never sees it (see also the e2e table over every route).
func TestRESTBadInputAtTheEdge(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, method, path, body, contentType string
		wantStatus, wantCode                  int
	}{
		{"body too large", "POST", "/api/v1/tasks", `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, "application/json", 413, 413},
		{"XML", "POST", "/api/v1/tasks", `{"name":"t","command":"true"}`, "application/xml", 415, 415},
		{"a form", "POST", "/api/v1/tasks", `name=t&command=true`, "application/x-www-form-urlencoded", 415, 415},
		{"NUL in a field", "POST", "/api/v1/tasks", `{"name":"a\u0000b","command":"true"}`, "application/json", 400, 30005},
		{"invalid UTF-8", "POST", "/api/v1/tasks", "{\"name\":\"\xff\",\"command\":\"true\"}", "application/json", 400, 30005},
		{"page token of bytes", "GET", "/api/v1/tasks?page_token=%00%ff..%2f", "", "", 400, 30005},
		{"id over the cap", "GET", "/api/v1/tasks/" + strings.Repeat("x", 129), "", "", 400, 30005},
		{"agent route", "POST", "/api/v1/agent/tasks/claim", `{"agent_id":"agent-001\u0000"}`, "application/json", 400, 30005},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.fake.Reset()
			bearer := e.userSecret
			if strings.HasPrefix(tt.path, "/api/v1/agent/") {
				bearer = e.agentSec
			}
			r := e.doRaw(t, tt.method, tt.path, bearer, tt.body, tt.contentType)
			assertEnvelope(t, r, tt.wantStatus, tt.wantCode, "")
			if calls := e.fake.Calls(); len(calls) != 0 {
				t.Errorf("the scheduler got %d calls, want none", len(calls))
			}
		})
	}
}

// doRaw sends a request with exactly the given Content-Type (none if "").
func (e *env) doRaw(t *testing.T, method, path, bearer, body, contentType string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// rawCodec sends a pre-encoded frame, so a test can put bytes on the wire
// that no generated client would marshal (invalid UTF-8).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = append((*b)[:0], data...)
		return nil
	}
	return proto.Unmarshal(data, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

func TestGRPCBadInputAtTheFrontDoor(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	admin := e.adminSecret(t)
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	actx, acancel := outgoing(admin)
	defer acancel()

	_, err := taskv1.NewTaskServiceClient(conn).CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "a\x00b", Command: "true"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "spec.name") {
		t.Errorf("NUL in spec.name: %v, want InvalidArgument naming the field", err)
	}
	bad := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}) // GetTaskRequest.id
	var out []byte
	err = conn.Invoke(ctx, "/taskmesh.task.v1.TaskService/GetTask", &bad, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("invalid UTF-8 in GetTaskRequest.id: %v, want InvalidArgument", err)
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}

	// The gateway's own services are checked the same way.
	client := adminv1.NewAdminServiceClient(conn)
	_, err = client.CreateTenant(actx, &adminv1.CreateTenantRequest{TenantId: "nul", Name: "a\x00", Tier: "standard"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("NUL in a tenant name: %v, want InvalidArgument", err)
	}
	bad = protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xc3}) // CreateTenantRequest.name
	bad = protowire.AppendBytes(protowire.AppendTag(bad, 1, protowire.BytesType), []byte("badutf"))
	err = conn.Invoke(actx, "/taskmesh.admin.v1.AdminService/CreateTenant", &bad, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("invalid UTF-8 in a tenant name: %v, want InvalidArgument", err)
	}
	for _, id := range []string{"nul", "badutf"} {
		if _, err := client.GetTenant(actx, &adminv1.GetTenantRequest{TenantId: id}); status.Code(err) != codes.NotFound {
			t.Errorf("tenant %s after a refused create: %v, want NotFound", id, err)
		}
	}
}

// Invalid UTF-8 fails protobuf's decoding before any field is read; the
// front door still names the field, in the message and as a BadRequest
// violation with the 30005 ErrorInfo, wherever the string is.
func TestGRPCInvalidUTF8NamesTheField(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	str := func(b []byte, num protowire.Number, v string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), []byte(v))
	}
	const bad = "x\xc3"
	// CreateTaskRequest: spec 1, request_id 2; TaskSpec: name 1, command 2, env 6.
	spec := func(inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), inner)
	}
	good := str(str(nil, 1, "n"), 2, "true")
	entry := protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), str(str(nil, 1, "A"), 2, bad))
	tests := []struct {
		name    string
		payload []byte
		field   string
	}{
		{"top-level", str(spec(good), 2, bad), "request_id"},
		{"nested", spec(str(str(nil, 2, "true"), 1, bad)), "spec.name"},
		{"map value", spec(append(good, entry...)), `spec.env["A"]`},
	}
	for _, tt := range tests {
		var out []byte
		err := conn.Invoke(ctx, "/taskmesh.task.v1.TaskService/CreateTask", &tt.payload, &out, grpc.ForceCodec(rawCodec{}))
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", tt.name, err, tt.field)
		}
		var info *errdetails.ErrorInfo
		var fields []string
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.BadRequest:
				for _, v := range d.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if info.GetMetadata()["code"] != "30005" {
			t.Errorf("%s: ErrorInfo = %v, want code 30005", tt.name, info)
		}
		if len(fields) != 1 || fields[0] != tt.field {
			t.Errorf("%s: violations %v, want [%s]", tt.name, fields, tt.field)
		}
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
}

// The front door serves gRPC server reflection to authenticated callers,
// listing the public services and describing them from the compiled
// descriptors (what grpcurl list and describe use).
func TestGRPCReflection(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	ask := func(bearer string, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
		ctx, cancel := outgoing(bearer)
		defer cancel()
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		// A refused stream may already be closed when Send runs: Send then
		// answers io.EOF and the status is what Recv returns.
		if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return stream.Recv()
	}
	list := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}
	if _, err := ask("", list); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous reflection: %v, want Unauthenticated", err)
	}
	for _, bearer := range []string{e.userSecret, e.agentSec, e.adminSecret(t)} {
		resp, err := ask(bearer, list)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{"taskmesh.task.v1.TaskService", "taskmesh.task.v1.LeaseService",
			"taskmesh.task.v1.AttemptFilesService", "taskmesh.managed.v1.ManagedServiceService",
			"taskmesh.managed.v1.ServiceAgentService",
			"taskmesh.video.v1.VideoService", "taskmesh.admin.v1.AdminService", "grpc.health.v1.Health"} {
			if !slices.Contains(names, want) {
				t.Errorf("list = %v, missing %s", names, want)
			}
		}
	}
	resp, err := ask(e.userSecret, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "taskmesh.task.v1.TaskService"}})
	if err != nil {
		t.Fatal(err)
	}
	files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
	found := false
	for _, raw := range files {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(raw, fd); err != nil {
			t.Fatal(err)
		}
		for _, s := range fd.GetService() {
			if s.GetName() == "TaskService" {
				found = slices.ContainsFunc(s.GetMethod(), func(m *descriptorpb.MethodDescriptorProto) bool { return m.GetName() == "CreateTask" })
			}
		}
	}
	if !found {
		t.Errorf("describe TaskService: no CreateTask in %d files", len(files))
	}

	// Internal services are neither listed nor described; public services
	// and the types their methods use still are.
	symbol := func(name string) *reflectionpb.ServerReflectionRequest {
		return &reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: name}}
	}
	byFile := func(path string) *reflectionpb.ServerReflectionRequest {
		return &reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: path}}
	}
	_ = agentv1.AgentLocalService_ServiceDesc // linked in, so its descriptors are in the registry
	for name, req := range map[string]*reflectionpb.ServerReflectionRequest{
		"AgentFleetService":           symbol("taskmesh.task.v1.AgentFleetService"),
		"AgentLocalService":           symbol("taskmesh.agent.v1.AgentLocalService"),
		"an AgentFleetService method": symbol("taskmesh.task.v1.AgentFleetService.SetAgentDrain"),
		"an AgentFleetService type":   symbol("taskmesh.task.v1.SetAgentDrainRequest"),
		"AgentFleetService's file":    byFile("taskmesh/task/v1/agent_fleet_service.proto"),
	} {
		resp, err := ask(e.userSecret, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetErrorResponse().GetErrorCode(); got != int32(codes.NotFound) {
			t.Errorf("describe %s: error code %d (%d files), want NotFound", name, got, len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()))
		}
	}
	for _, name := range []string{"taskmesh.task.v1.TaskService", "taskmesh.task.v1.TaskSpec", "taskmesh.task.v1.CreateTaskRequest",
		"taskmesh.admin.v1.AgentService", "taskmesh.admin.v1.RegisterAgentRequest", "taskmesh.deadletter.v1.DeadLetterService",
		"google.protobuf.Timestamp", "grpc.health.v1.Health"} {
		resp, err := ask(e.userSecret, symbol(name))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetErrorResponse() != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Errorf("describe %s: %v, want its file", name, resp.GetErrorResponse())
		}
	}
}

// A JSON body under the type a client puts on a body it did not label
// (curl -d: application/x-www-form-urlencoded; fetch: text/plain) is read
// as JSON, so the task is created as with application/json.
func TestRESTReadsJSONUnderDefaultContentTypes(t *testing.T) {
	e := newEnv(t)
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain;charset=UTF-8"} {
		t.Run(ct, func(t *testing.T) {
			e.fake.Reset()
			r := e.doRaw(t, "POST", "/api/v1/tasks", e.userSecret, `{"name":"train","command":"python","args":["train.py"]}`, ct)
			if r.status != http.StatusOK {
				t.Fatalf("POST /api/v1/tasks as %s: %d %s", ct, r.status, r.body)
			}
			c, ok := e.fake.LastCall()
			if !ok || c.Method != "CreateTask" {
				t.Fatalf("the scheduler got %v, want CreateTask", e.fake.Calls())
			}
			spec := c.Request.(*taskv1.CreateTaskRequest).GetSpec()
			if spec.GetName() != "train" || spec.GetCommand() != "python" || len(spec.GetArgs()) != 1 {
				t.Errorf("the scheduler got spec %v, want the body's", spec)
			}
		})
	}
}

// Malformed JSON under curl -d's default type is answered as malformed
// JSON under application/json is: 400 in the route's envelope (30005 on
// the task API, InvalidParameter on the video API), not 415, and nothing
// reaches the scheduler.
func TestRESTMalformedJSONUnderDefaultContentTypeIs400(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ path, body, code string }{
		{"/api/v1/tasks", `{"name":"train",`, "30005"},
		{"/v1/video/generations", `{"model":`, `"InvalidParameter"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			e.fake.Reset()
			r := e.doRaw(t, "POST", tc.path, e.userSecret, tc.body, "application/x-www-form-urlencoded")
			if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"code":`+tc.code) {
				t.Fatalf("POST %s with malformed JSON as a form: %d %s, want 400 with code %s", tc.path, r.status, r.body, tc.code)
			}
			if calls := e.fake.Calls(); len(calls) != 0 {
				t.Errorf("the scheduler got %v, want nothing", calls)
			}
		})
	}
}
