package edge

import (
	"testing"

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
