package edge

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
)

func TestCheckFrame(t *testing.T) {
	const create = "/taskmesh.task.v1.TaskService/CreateTask"
	frame := func(spec *taskv1.TaskSpec) []byte {
		b, err := proto.Marshal(&taskv1.CreateTaskRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Invalid UTF-8 cannot be marshalled from Go: write the wire by hand
	// (CreateTaskRequest.request_id, field 2).
	invalidUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xff, 0xfe})
	tests := []struct {
		name    string
		method  string
		payload []byte
		ok      bool
	}{
		{"good", create, frame(&taskv1.TaskSpec{Name: "été", Args: []string{"a"}, Env: map[string]string{"A": "b"}}), true},
		{"unknown method passes", "/x.Y/Z", []byte{0xff}, true},
		{"NUL in a field", create, frame(&taskv1.TaskSpec{Name: "a\x00"}), false},
		{"NUL in a repeated item", create, frame(&taskv1.TaskSpec{Name: "a", Args: []string{"ok", "b\x00"}}), false},
		{"NUL in a map value", create, frame(&taskv1.TaskSpec{Name: "a", Env: map[string]string{"A": "\x00"}}), false},
		{"NUL in a map key", create, frame(&taskv1.TaskSpec{Name: "a", Env: map[string]string{"A\x00": "b"}}), false},
		{"invalid UTF-8", create, invalidUTF8, false},
		{"not a message", create, []byte{0xff, 0xff, 0xff}, false},
	}
	for _, tt := range tests {
		err := CheckFrame(tt.method, tt.payload)
		if tt.ok != (err == nil) || (err != nil && status.Code(err) != codes.InvalidArgument) {
			t.Errorf("%s: %v", tt.name, err)
		}
		// A refusal carries the business code of every invalid request, so
		// a caller (an agent delivering an outcome) knows that sending it
		// again cannot succeed.
		if err != nil && grpcserver.Code(err) != grpcserver.CodeInvalidArgument {
			t.Errorf("%s: business code %d, want %d", tt.name, grpcserver.Code(err), grpcserver.CodeInvalidArgument)
		}
	}
}

// TestCheckFrameNamesInvalidUTF8 checks that invalid UTF-8, which fails
// protobuf's decoding before any field is read, is refused naming the
// field, as NUL is, with the field as a BadRequest violation.
func TestCheckFrameNamesInvalidUTF8(t *testing.T) {
	const create = "/taskmesh.task.v1.TaskService/CreateTask"
	str := func(b []byte, num protowire.Number, v string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), []byte(v))
	}
	msg := func(b []byte, num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), inner)
	}
	const bad = "a\xffb"
	// TaskSpec: name 1, args 4, env 6 (map<string,string>); CreateTaskRequest: spec 1, request_id 2.
	spec := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return msg(nil, 1, b)
	}
	entry := func(k, v string) []byte { return msg(nil, 6, str(str(nil, 1, k), 2, v)) }
	tests := []struct {
		name    string
		payload []byte
		path    string
	}{
		{"top-level field", str(spec(str(nil, 1, "ok")), 2, bad), "request_id"},
		{"nested field", spec(str(nil, 1, bad)), "spec.name"},
		{"repeated item", spec(str(nil, 1, "n"), str(nil, 4, "ok"), str(nil, 4, bad)), "spec.args[1]"},
		{"map value", spec(str(nil, 1, "n"), entry("A", "ok"), entry("B", bad)), `spec.env["B"]`},
		{"map value before its key", spec(msg(nil, 6, str(str(nil, 2, bad), 1, "K"))), `spec.env["K"]`},
		{"map key", spec(entry(bad, "v")), "spec.env (a key)"},
	}
	for _, tt := range tests {
		err := CheckFrame(create, tt.payload)
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || st.Message() != "field "+tt.path+" is not valid UTF-8" {
			t.Errorf("%s: %v, want InvalidArgument naming %s", tt.name, err, tt.path)
			continue
		}
		if grpcserver.Code(err) != grpcserver.CodeInvalidArgument {
			t.Errorf("%s: business code %d", tt.name, grpcserver.Code(err))
		}
		var fields []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if len(fields) != 1 || fields[0] != tt.path {
			t.Errorf("%s: violations %v, want [%s]", tt.name, fields, tt.path)
		}
	}
}
