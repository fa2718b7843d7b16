package apijson

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
)

// With StrictIntegers a number sent as a string is refused, named by its
// path in the body, wherever the integer field is: nested, a map's value,
// inside a list of messages. Everything else decodes as before, and
// protojson still reports what it always did.
func TestStrictIntegersRefuseNumbersSentAsStrings(t *testing.T) {
	strict := &Marshaler{JSONPb: runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}, StrictIntegers: true}
	for _, tt := range []struct {
		body string
		msg  proto.Message
		want string
	}{
		{`{"model": "m", "input": {"prompt": "p"}, "parameters": {"seed": "10"}}`, &videov1.CreateVideoGenerationRequest{},
			`parameters.seed: must be an integer, not the string "10"`},
		{`{"parameters": {"duration": "5", "seed": 1}}`, &videov1.CreateVideoGenerationRequest{},
			`parameters.duration: must be an integer, not the string "5"`},
		{`{"parameters": {"seed": "1e3"}}`, &videov1.CreateVideoGenerationRequest{}, `parameters.seed: must be an integer, not the string "1e3"`},
		{`{"requests": {"cpu": 1000, "nvidia.com/gpu": "1"}}`, &quotav1.WorkloadQueued{},
			`requests["nvidia.com/gpu"]: must be an integer, not the string "1"`},
		{`{"name": "g", "tasks": [{"name": "a", "timeout": 5}, {"name": "b", "env": {"A": "1"}, "timeout": "60"}]}`, &taskv1.CreateTaskGroupRequest{},
			`tasks[1].timeout: must be an integer, not the string "60"`},
	} {
		err := strict.NewDecoder(strings.NewReader(tt.body)).Decode(tt.msg)
		if err == nil || err.Error() != tt.want || !errors.Is(err, errStringInteger) {
			t.Errorf("%s: %v, want %q", tt.body, err, tt.want)
		}
	}
	for _, tt := range []struct {
		body string
		msg  proto.Message
		want string // "": decodes
	}{
		{`{"model": "m", "input": {"prompt": "10", "image": "data:x"}, "parameters": {"seed": 10, "resolution": "720P"}}`, &videov1.CreateVideoGenerationRequest{}, ""},
		// Strings in string fields, unknown fields and well-known types
		// are not integers.
		{`{"name": "a", "env": {"N": "10"}, "args": ["1"]}`, &taskv1.TaskSpec{}, ""},
		{`{"parameters": {"seed": 1.5}}`, &videov1.CreateVideoGenerationRequest{}, "seed"},
		{`{"size": "10"}`, &videov1.CreateVideoGenerationRequest{}, "unknown field"},
		{`{"parameters": {"seed": `, &videov1.CreateVideoGenerationRequest{}, "unexpected EOF"},
	} {
		err := strict.NewDecoder(strings.NewReader(tt.body)).Decode(tt.msg)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.body, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, errStringInteger)):
			t.Errorf("%s: %v, want protojson's error naming %q", tt.body, err, tt.want)
		}
	}
	// Without the option, protobuf JSON's rule: "10" is 10.
	loose := &Marshaler{JSONPb: runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}}
	var req videov1.CreateVideoGenerationRequest
	if err := loose.NewDecoder(strings.NewReader(`{"parameters": {"seed": "10"}}`)).Decode(&req); err != nil || req.GetParameters().GetSeed() != 10 {
		t.Errorf("loose decoder: %v, seed %d", err, req.GetParameters().GetSeed())
	}
	// The generated handlers decode a body field through a pointer to it.
	var spec *taskv1.TaskSpec
	if err := strict.NewDecoder(strings.NewReader(`{"timeout": "1"}`)).Decode(&spec); err == nil || err.Error() != `timeout: must be an integer, not the string "1"` {
		t.Errorf("into a body field: %v", err)
	}
}

// With StrictInt32 a number sent as a string is refused in a 32-bit
// field, and a 64-bit field takes the string form protobuf JSON writes it
// in, so what a client read it may send back.
func TestStrictInt32LeavesWideIntegersTheirStringForm(t *testing.T) {
	strict := &Marshaler{JSONPb: runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}, StrictInt32: true}
	for body, want := range map[string]string{
		`{"name": "t", "timeout": "60"}`:                        `timeout: must be an integer, not the string "60"`,
		`{"priority": 3, "max_retries": "2"}`:                   `max_retries: must be an integer, not the string "2"`,
		`{"agent_id": "a", "progress": "50"}`:                   "",
		`{"task_id": "t", "attempt_id": "a", "exit_code": "0"}`: "",
	} {
		var msg proto.Message = &taskv1.TaskSpec{}
		switch {
		case strings.Contains(body, "progress"):
			msg = &taskv1.ReportTaskProgressRequest{}
			want = `progress: must be an integer, not the string "50"`
		case strings.Contains(body, "exit_code"):
			msg = &taskv1.CompleteTaskRequest{}
			want = `exit_code: must be an integer, not the string "0"`
		}
		err := strict.NewDecoder(strings.NewReader(body)).Decode(msg)
		if err == nil || err.Error() != want || !errors.Is(err, errStringInteger) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	var wide quotav1.WorkloadQueued
	if err := strict.NewDecoder(strings.NewReader(`{"requests": {"cpu": "1000", "nvidia.com/gpu": 1}}`)).Decode(&wide); err != nil ||
		wide.GetRequests()["cpu"] != 1000 {
		t.Errorf("a 64-bit value as a string: %v, %v", err, wide.GetRequests())
	}
	var obj taskv1.ResultObject
	if err := strict.NewDecoder(strings.NewReader(`{"key": "k", "size_bytes": "9"}`)).Decode(&obj); err != nil || obj.GetSizeBytes() != 9 {
		t.Errorf("size_bytes as a string: %v, %d", err, obj.GetSizeBytes())
	}
}

// Decoding errors begin with what is wrong: protojson's "proto:" prefix,
// its non-breaking space and the position of a wrong value are taken off;
// a syntax error keeps its position.
func TestDecodingErrorsBeginWithWhatIsWrong(t *testing.T) {
	m := &Marshaler{JSONPb: runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}}
	for _, tt := range []struct {
		body string
		msg  proto.Message
		want string
	}{
		{`{"retry_delay": "x"}`, &taskv1.TaskSpec{}, `invalid value for int32 field retry_delay: "x"`},
		{`{"input": {"prompt": 123}}`, &videov1.CreateVideoGenerationRequest{}, `invalid value for string field prompt: 123`},
		{`{"name": "x", "env": {"A": 1}}`, &taskv1.TaskSpec{}, `invalid value for string field env["A"]: 1`},
		{`{"size": "1280*720"}`, &videov1.CreateVideoGenerationRequest{}, `unknown field "size"`},
		{`{"name": "x", "depends_on": "a"}`, &taskv1.TaskSpec{}, `syntax error (line 1:29): unexpected token "a" for field depends_on`},
	} {
		err := m.NewDecoder(strings.NewReader(tt.body)).Decode(tt.msg)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: %q, want %q", tt.body, err, tt.want)
		}
	}
}

// A body is one JSON value: data after it is refused, white space is not,
// with or without StrictIntegers.
func TestDataAfterTheBodyIsRefused(t *testing.T) {
	for _, m := range []*Marshaler{
		{JSONPb: runtime.JSONPb{}},
		{JSONPb: runtime.JSONPb{}, StrictInt32: true},
		{JSONPb: runtime.JSONPb{}, StrictIntegers: true},
	} {
		for _, body := range []string{`{"name": "a"} xyz`, `{"name": "a"}}`, `{"name": "a"}]`, `{"name": "a"}{"name": "b"}`, `{"name": "a"} 1`} {
			err := m.NewDecoder(strings.NewReader(body)).Decode(&taskv1.TaskSpec{})
			if err == nil || err.Error() != "unexpected data after the JSON body's value" || !errors.Is(err, errTrailingData) {
				t.Errorf("%s: %v", body, err)
			}
		}
		var spec taskv1.TaskSpec
		if err := m.NewDecoder(strings.NewReader(" {\"name\": \"a\"} \r\n\t ")).Decode(&spec); err != nil || spec.GetName() != "a" {
			t.Errorf("white space after the body: %v", err)
		}
		// Through a pointer to a body field, as the generated handlers do.
		var field *taskv1.TaskSpec
		if err := m.NewDecoder(strings.NewReader(`{"name": "a"} x`)).Decode(&field); err == nil {
			t.Error("data after a body field's value was taken")
		}
	}
}

// The pre-check finds every string that begins like a number, wherever it
// is, and lets other bodies skip the walk.
func TestMayHoldNumberString(t *testing.T) {
	for body, want := range map[string]bool{
		`{"name": "a", "timeout": 60}`:          false,
		`{"timeout": "60"}`:                     true,
		`{"name": "a", "env": {"N": "-1"}}`:     true,
		`{"a":"x","b":".5"}`:                    true,
		`{"name": "a\"1", "args": ["b"]}`:       true, // every quote is looked at: a walk too many, never one too few
		`{"name": "noop-1", "command": "true"}`: false,
		`"7"`:                                   true,
		`{"name": "`:                            false,
		``:                                      false,
	} {
		if got := mayHoldNumberString([]byte(body)); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}

// With PathErrors, a value of the wrong type or shape and a key of no
// field are named by their path in the body, then what is wrong, in the
// form of the API's other messages; the string-integer check keeps its
// wording, which is the same.
func TestPathErrorsNameTheFieldByItsPath(t *testing.T) {
	m := &Marshaler{JSONPb: runtime.JSONPb{}, StrictIntegers: true, PathErrors: true}
	for _, tt := range []struct{ body, want string }{
		{`{"parameters": {"seed": "10"}}`, `parameters.seed: must be an integer, not the string "10"`},
		{`{"parameters": {"seed": "abc"}}`, `parameters.seed: must be an integer, not the string "abc"`},
		{`{"parameters": {"seed": true}}`, `parameters.seed: must be an integer, not true`},
		{`{"parameters": {"seed": 1.5}}`, `parameters.seed: must be an integer, not 1.5`},
		{`{"parameters": {"watermark": 1}}`, `parameters.watermark: must be true or false, not 1`},
		{"{\n  \"model\": \"m\",\n  \"input\": {\"prompt\": 5}\n}", `input.prompt: must be a string, not 5`},
		{`{"input": {"prompt": {"text": "x"}}}`, `input.prompt: must be a string, not an object`},
		{`{"input": {"prompt": ["x"]}}`, `input.prompt: must be a string, not a list`},
		{`{"webhook": {"url": 5}}`, `webhook.url: must be a string, not 5`},
		{`{"webhook": {"url": "https://x", "secret": "s"}}`, `webhook.secret: unknown field`},
		{`{"input": {"prompt": "x", "bar": 1}}`, `input.bar: unknown field`},
		{`{"model": "m", "size": "1280*720"}`, `size: unknown field`},
		{`{"parameters": {"prompt_extend": false, "prompt_extend": 0}}`, `parameters.prompt_extend: duplicate field`},
		{`{"model": "m", "model": "n"}`, `model: duplicate field`},
		{`{"parameters": "fast"}`, `parameters: must be an object, not the string "fast"`},
	} {
		err := m.NewDecoder(strings.NewReader(tt.body)).Decode(&videov1.CreateVideoGenerationRequest{})
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %q", tt.body, err, tt.want)
		}
	}
}

// heldBytes is a body in memory, as the gateway's edge holds one.
type heldBytes struct {
	*strings.Reader
	b []byte
}

func (h heldBytes) HeldBytes() []byte { return h.b }

// A strict decoder reads a held body's bytes without copying them, and
// decodes and refuses exactly as from any reader.
func TestStrictDecoderTakesAHeldBodyAsItIs(t *testing.T) {
	b := []byte(`{"name": "a", "timeout": 5}`)
	if got, err := readWhole(heldBytes{b: b}); err != nil || &got[0] != &b[0] || len(got) != len(b) {
		t.Fatalf("readWhole of a held body: %q, %v: copied", got, err)
	}
	strict := &Marshaler{JSONPb: runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}, StrictInt32: true}
	var spec taskv1.TaskSpec
	if err := strict.NewDecoder(heldBytes{b: b}).Decode(&spec); err != nil || spec.GetName() != "a" || spec.GetTimeout() != 5 {
		t.Fatalf("decoded %v, %v", &spec, err)
	}
	dec := strict.NewDecoder(heldBytes{b: b})
	if err := dec.Decode(&spec); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&spec); err != io.EOF {
		t.Fatalf("a second value after a whole body: %v, want io.EOF", err)
	}
	bad := []byte(`{"name": "a", "timeout": "5"}`)
	if err := strict.NewDecoder(heldBytes{b: bad}).Decode(&taskv1.TaskSpec{}); err == nil || err.Error() != `timeout: must be an integer, not the string "5"` {
		t.Fatalf("a string timeout in a held body: %v", err)
	}
	// What protojson refuses is decoded again by the streaming decoder:
	// the same errors as from a body streamed.
	for _, body := range []string{`{"nme": "a"}`, `{"retry_delay": "x"}`, `{"env": {"A": 1}}`, `{"name": "a"} x`, `{"name": `, ``, ` `} {
		streamed := strict.NewDecoder(strings.NewReader(body)).Decode(&taskv1.TaskSpec{})
		held := strict.NewDecoder(heldBytes{b: []byte(body)}).Decode(&taskv1.TaskSpec{})
		if streamed == nil || held == nil || streamed.Error() != held.Error() {
			t.Errorf("%q: held %v, streamed %v", body, held, streamed)
		}
	}
}
