package apijson

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	// Every message type the API serves, registered for the comparison.
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/event/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
)

// optionSets are the protojson options the gateway uses (the API's proto
// names with every field present; the video API's JSON names) and the
// others the fast path implements.
var optionSets = map[string]protojson.MarshalOptions{
	"api":           {UseProtoNames: true, EmitUnpopulated: true},
	"video":         {EmitUnpopulated: true},
	"populated":     {},
	"defaults":      {EmitDefaultValues: true},
	"enum numbers":  {UseProtoNames: true, EmitUnpopulated: true, UseEnumNumbers: true},
	"both emitters": {EmitUnpopulated: true, EmitDefaultValues: true},
}

// apiTypes are the message types of the gen packages.
func apiTypes(t *testing.T) []protoreflect.MessageType {
	var types []protoreflect.MessageType
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if strings.HasPrefix(string(mt.Descriptor().FullName()), "taskmesh.") {
			types = append(types, mt)
		}
		return true
	})
	if len(types) < 100 {
		t.Fatalf("only %d taskmesh message types registered", len(types))
	}
	return types
}

// same checks that Marshal writes what protojson writes for m. Where the
// fast path writes m, its bytes must be protojson's once protojson's random
// spaces are compacted away; where it hands m to protojson (a type or a
// value it leaves to it), Marshal's answer must be protojson's, error
// included.
func same(t *testing.T, name string, o protojson.MarshalOptions, m proto.Message) {
	t.Helper()
	full := m.ProtoReflect().Descriptor().FullName()
	want, wantErr := o.Marshal(m)
	got, err := Options{MarshalOptions: o}.Marshal(m)
	if p := planFor(m.ProtoReflect().Descriptor()); p.supported && m.ProtoReflect().IsValid() {
		w := writer{opts: Options{MarshalOptions: o}}
		if fastErr := w.message(m.ProtoReflect(), p); fastErr == nil {
			if wantErr != nil {
				t.Fatalf("%s %s: the fast path wrote %s where protojson fails: %v", name, full, w.buf, wantErr)
			}
			if !bytes.Equal(w.buf, compact(t, want)) {
				t.Fatalf("%s %s differs\n got: %s\nwant: %s", name, full, w.buf, want)
			}
			if !bytes.Equal(got, w.buf) {
				t.Fatalf("%s %s: Marshal did not answer the fast path's bytes", name, full)
			}
			return
		}
	}
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("%s %s: Marshal answered %s, %v; protojson %s, %v", name, full, got, err, want, wantErr)
	}
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return out.Bytes()
}

func TestSameAsProtojsonOnEveryAPIType(t *testing.T) {
	types := apiTypes(t)
	rng := rand.New(rand.NewPCG(1, 2))
	fastTypes := 0
	for _, mt := range types {
		if planFor(mt.Descriptor()).supported {
			fastTypes++
		}
		for name, o := range optionSets {
			same(t, name, o, mt.New().Interface())
			for range 20 {
				m := mt.New()
				fill(rng, m, 3)
				same(t, name, o, m.Interface())
			}
		}
	}
	// The comparison means something only if most types take the fast
	// path; those that reach Struct or wrappers do not.
	if fastTypes < len(types)*3/4 {
		t.Fatalf("only %d of %d API types take the fast path", fastTypes, len(types))
	}
	t.Logf("%d API types, %d on the fast path", len(types), fastTypes)
}

func TestTaskTakesTheFastPath(t *testing.T) {
	for _, m := range []proto.Message{&taskv1.Task{}, &taskv1.ListTasksResponse{}, &taskv1.CreateTaskResponse{}} {
		if !planFor(m.ProtoReflect().Descriptor()).supported {
			t.Errorf("%T is written by protojson", m)
		}
	}
	for _, m := range []proto.Message{&structpb.Struct{}, &structpb.Value{}} {
		if planFor(m.ProtoReflect().Descriptor()).supported {
			t.Errorf("%T takes the fast path; its JSON form is its own", m)
		}
	}
}

// TestNullOptional: with NullOptional an unset proto3 optional field is
// null where protojson leaves it out; everything else is protojson's.
func TestNullOptional(t *testing.T) {
	o := Options{MarshalOptions: optionSets["api"], NullOptional: true}
	got, err := o.Marshal(&taskv1.Task{Id: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(got, &body); err != nil {
		t.Fatalf("invalid JSON %s: %v", got, err)
	}
	for _, k := range []string{"exit_code", "error"} {
		if v, ok := body[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null in %s", k, v, ok, got)
		}
	}
	want, err := optionSets["api"].Marshal(&taskv1.Task{Id: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	var protojsonBody map[string]any
	if err := json.Unmarshal(want, &protojsonBody); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"exit_code", "error"} {
		if _, ok := protojsonBody[k]; ok {
			t.Fatalf("protojson wrote %s for an unset optional field: %s", k, want)
		}
		delete(body, k)
	}
	if a, b := mustMarshal(t, body), mustMarshal(t, protojsonBody); a != b {
		t.Errorf("apart from exit_code and error\n got: %s\nwant: %s", a, b)
	}

	// Set, it is the value, 0 included.
	code := int32(0)
	got, err = o.Marshal(&taskv1.Task{Id: "t-1", ExitCode: &code})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"exit_code":0`) {
		t.Errorf("exit_code 0 missing from %s", got)
	}
	// Without EmitUnpopulated nothing unset is written.
	sparse := Options{NullOptional: true}
	if got, _ := sparse.Marshal(&taskv1.Task{Id: "t-1"}); strings.Contains(string(got), "exitCode") || strings.Contains(string(got), "exit_code") {
		t.Errorf("without EmitUnpopulated: %s", got)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestValuesProtojsonWritesItsOwnWay sends the values whose JSON form is
// special: escapes, floats, 64-bit integers, times at their edges, and
// values the fast path leaves to protojson.
func TestValuesProtojsonWritesItsOwnWay(t *testing.T) {
	o := optionSets["api"]
	strs := []string{"", "plain", `quote " and \ backslash`, "\x00\x01\x1f\x7f", "\b\f\n\r\t", "<html>&amp;",
		"ünïcødé 日本 🎞", "\u2028\u2029", "bad \xff utf-8", "\xed\xa0\x80"}
	for _, s := range strs {
		same(t, "string", o, &taskv1.Task{Name: s, Env: map[string]string{s: s}, Args: []string{s}})
	}
	times := []*timestamppb.Timestamp{
		{Seconds: 0}, {Seconds: 1_700_000_000, Nanos: 1}, {Seconds: 1_700_000_000, Nanos: 120_000_000},
		{Seconds: 1_700_000_000, Nanos: 123_456_000}, {Seconds: 1_700_000_000, Nanos: 999_999_999},
		{Seconds: -62135596800}, {Seconds: 253402300799, Nanos: 999_999_999},
		{Seconds: -62135596801}, {Seconds: 253402300800}, {Nanos: -1}, {Nanos: 1_000_000_000},
	}
	for _, ts := range times {
		same(t, "timestamp", o, &taskv1.Task{CreatedAt: ts})
		same(t, "bare timestamp", o, ts)
	}
	durations := []*durationpb.Duration{
		{}, {Seconds: 30}, {Seconds: -30, Nanos: -500_000_000}, {Nanos: 1}, {Nanos: -1}, {Seconds: 1, Nanos: -1},
		{Seconds: 315576000000}, {Seconds: 315576000001}, {Nanos: 1_000_000_000},
	}
	for _, d := range durations {
		same(t, "duration", o, d)
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-6, 1e-7, 1e20, 1e21, 123456789.125, math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)} {
		same(t, "double", o, structpb.NewNumberValue(f))
		fillFloats(t, o, f)
	}
	same(t, "nil message", o, (*taskv1.Task)(nil))
}

// fillFloats writes f in every float and double field of the API types
// that has one.
func fillFloats(t *testing.T, o protojson.MarshalOptions, f float64) {
	t.Helper()
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if !strings.HasPrefix(string(mt.Descriptor().FullName()), "taskmesh.") {
			return true
		}
		m := mt.New()
		fds := mt.Descriptor().Fields()
		set := false
		for i := range fds.Len() {
			fd := fds.Get(i)
			if fd.Cardinality() == protoreflect.Repeated {
				continue
			}
			switch fd.Kind() {
			case protoreflect.DoubleKind:
				m.Set(fd, protoreflect.ValueOfFloat64(f))
				set = true
			case protoreflect.FloatKind:
				m.Set(fd, protoreflect.ValueOfFloat32(float32(f)))
				set = true
			}
		}
		if set {
			same(t, "float", o, m.Interface())
		}
		return true
	})
}

// fill sets a random selection of m's fields to random values, nested
// messages down to depth.
func fill(rng *rand.Rand, m protoreflect.Message, depth int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if rng.IntN(3) == 0 {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(4) {
				if v, ok := randomValue(rng, fd, l.NewElement, depth); ok {
					l.Append(v)
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(4) {
				k, _ := randomValue(rng, fd.MapKey(), nil, depth)
				if v, ok := randomValue(rng, fd.MapValue(), mp.NewValue, depth); ok {
					mp.Set(k.MapKey(), v)
				}
			}
		default:
			if v, ok := randomValue(rng, fd, func() protoreflect.Value { return m.NewField(fd) }, depth); ok {
				m.Set(fd, v)
			}
		}
	}
}

var sampleStrings = []string{"", "a", "task-01HXYZ", `q"uote`, `back\slash`, "line\nbreak", "\x01ctl", "<&>",
	"日本語", "🎞 emoji", "\u2028", "ok"}

func randomValue(rng *rand.Rand, fd protoreflect.FieldDescriptor, newMessage func() protoreflect.Value, depth int) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0), true
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(sampleStrings[rng.IntN(len(sampleStrings))]), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -1, 42, math.MaxInt32, math.MinInt32}[rng.IntN(6)]), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, 42, math.MaxUint32}[rng.IntN(4)]), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -1, 1 << 53, math.MaxInt64, math.MinInt64}[rng.IntN(6)]), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, math.MaxUint64}[rng.IntN(3)]), true
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32([]float32{0, 0.5, -3.25, 1e-7, 3e38}[rng.IntN(5)]), true
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, 0.1, -2.5, 1e-7, 1e21, 12345.678}[rng.IntN(6)]), true
	case protoreflect.BytesKind:
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return protoreflect.ValueOfBytes(b), true
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if rng.IntN(5) == 0 {
			return protoreflect.ValueOfEnum(999), true // a number the enum does not name
		}
		return protoreflect.ValueOfEnum(vals.Get(rng.IntN(vals.Len())).Number()), true
	case protoreflect.MessageKind:
		if depth == 0 {
			return protoreflect.Value{}, false
		}
		v := newMessage()
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			proto.Merge(v.Message().Interface(), &timestamppb.Timestamp{Seconds: rng.Int64N(4_000_000_000), Nanos: []int32{0, 1_000_000, 1_500, 7}[rng.IntN(4)]})
		case "google.protobuf.Duration":
			proto.Merge(v.Message().Interface(), &durationpb.Duration{Seconds: rng.Int64N(100_000), Nanos: []int32{0, 250_000_000, 9}[rng.IntN(3)]})
		case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
			s, _ := structpb.NewStruct(map[string]any{"k": "v", "n": 1.5, "list": []any{true, nil}})
			switch fd.Message().FullName() {
			case "google.protobuf.Struct":
				proto.Merge(v.Message().Interface(), s)
			case "google.protobuf.Value":
				proto.Merge(v.Message().Interface(), structpb.NewStructValue(s))
			}
		default:
			if fd.Message().FullName().Parent() != "google.protobuf" {
				fill(rng, v.Message(), depth-1)
			}
		}
		return v, true
	}
	return protoreflect.Value{}, false
}

func BenchmarkMarshalTask(b *testing.B) {
	task := &taskv1.Task{}
	fill(rand.New(rand.NewPCG(3, 4)), task.ProtoReflect(), 2)
	o := optionSets["api"]
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.Marshal(task); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apijson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (Options{MarshalOptions: o}).Marshal(task); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A wrongly typed value is reported under the key the request used: the
// proto name, not protojson's camelCase JSON name; a field with its own
// json_name keeps it.
func TestDecoderNamesTheFieldAsSent(t *testing.T) {
	m := &Marshaler{JSONPb: runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}}
	for _, tt := range []struct {
		body string
		msg  proto.Message
		want string
	}{
		{`{"spec": {"retry_delay": "x"}}`, &taskv1.CreateTaskRequest{}, "field retry_delay:"},
		{`{"retry_delay": "x"}`, &taskv1.TaskSpec{}, "field retry_delay:"},
		{`{"name": 1}`, &taskv1.TaskSpec{}, "field name:"},
		{`{"parameters": {"prompt_extend": "no"}}`, &videov1.CreateVideoGenerationRequest{}, "field prompt_extend:"},
		// A map's value: protojson names the entry's field, "value".
		{`{"name": "x", "env": {"A": "1", "B": 2}}`, &taskv1.TaskSpec{}, `field env["B"]: 2`},
		{"\n  {\"spec\": {\"args\": [\"a\"],\n \"resources\": {\"cpu\": 2}}}", &taskv1.CreateTaskRequest{}, `field resources["cpu"]: 2`},
		{`{"spec": {"env": {"名字": null}}}`, &taskv1.CreateTaskRequest{}, `field env["名字"]: null`},
		{`{"name": "g", "tasks": [{"name": "a", "env": {}}, {"name": "b", "env": {"K": [1]}}]}`, &taskv1.CreateTaskGroupRequest{}, `field env["K"]: [`},
	} {
		err := m.NewDecoder(strings.NewReader(tt.body)).Decode(tt.msg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want it to name %q", tt.body, err, tt.want)
		}
	}
	// A value of the wrong shape is a syntax error to protojson, which
	// names no field; the field is added.
	for _, tt := range []struct {
		body string
		msg  proto.Message
		want string
	}{
		{`{"name": "x", "depends_on": "a"}`, &taskv1.TaskSpec{}, "for field depends_on"},
		{`{"spec": {"env": ["A"]}}`, &taskv1.CreateTaskRequest{}, "for field spec.env"},
		{`{"name": "g", "tasks": [{"name": "a", "args": {"x": 1}}]}`, &taskv1.CreateTaskGroupRequest{}, "for field tasks.args"},
	} {
		err := m.NewDecoder(strings.NewReader(tt.body)).Decode(tt.msg)
		if err == nil || !strings.Contains(err.Error(), "syntax error") || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want it to end %q", tt.body, err, tt.want)
		}
	}
	// The generated handlers decode a body field through a pointer to it.
	var spec *taskv1.TaskSpec
	if err := m.NewDecoder(strings.NewReader(`{"retry_delay": "x"}`)).Decode(&spec); err == nil || !strings.Contains(err.Error(), "field retry_delay:") {
		t.Errorf("into a body field: %v", err)
	}
}
