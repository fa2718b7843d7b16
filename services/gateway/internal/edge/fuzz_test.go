package edge

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// FuzzJSONBodyCheck compares the scan of JSON bodies with a decoder's
// view: valid JSON the scan passes has no NUL and only valid UTF-8 in any
// string; valid JSON it refuses really holds NUL or an unpaired surrogate.
func FuzzJSONBodyCheck(f *testing.F) {
	for _, s := range []string{`{"name":"a"}`, `{"name":"a\u0000"}`, `{"a\u0000":1}`, `["\ud83d\ude00"]`, `["\ud83d"]`,
		`{"x":"\\u0000"}`, "{\"x\":\"\xff\"}", `{"nested":{"list":["ok","\u0000"]}}`, `"\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg := badJSONText(b)
		if !json.Valid(b) {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("valid JSON does not decode: %v", err)
		}
		nul := hasNUL(v)
		switch {
		case msg == "" && nul:
			t.Fatalf("passed a body with NUL: %q", b)
		case msg == "" && !utf8.Valid(b):
			t.Fatalf("passed a body with invalid UTF-8: %q", b)
		case msg != "" && !nul && utf8.Valid(b) && !strings.Contains(msg, "surrogate"):
			t.Fatalf("refused %q (%s) but it holds no NUL", b, msg)
		}
	})
}

// hasNUL reports whether any string (key or value) of v holds NUL.
func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		for _, e := range x {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// FuzzCheckFrame feeds arbitrary request messages to the front door's
// check: nothing panics, and a message it passes decodes and holds no NUL.
func FuzzCheckFrame(f *testing.F) {
	good, _ := proto.Marshal(&taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "n", Command: "c", Args: []string{"a"}, Env: map[string]string{"K": "v"}}})
	bad, _ := proto.Marshal(&taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "n\x00"}})
	for _, b := range [][]byte{good, bad, {0x0a, 0x02, 0xff, 0xfe}, {0xff}, nil} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckFrame("/taskmesh.task.v1.TaskService/CreateTask", b) != nil {
			return
		}
		var m taskv1.CreateTaskRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatalf("passed a frame that does not decode: %v", err)
		}
		s := m.GetSpec()
		for _, str := range append([]string{s.GetName(), s.GetCommand(), m.GetRequestId()}, s.GetArgs()...) {
			if strings.IndexByte(str, 0) >= 0 {
				t.Fatalf("passed a frame with NUL: %q", str)
			}
		}
	})
}
