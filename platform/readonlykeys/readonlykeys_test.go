package readonlykeys_test

import (
	"encoding/json"
	"reflect"
	"testing"

	agentv1 "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/readonlykeys"
)

func TestBetweenNamesTheShownKeysTheRequestLacks(t *testing.T) {
	keys := readonlykeys.Between((&agentv1.LocalTask{}).ProtoReflect().Descriptor(), (&taskv1.TaskSpec{}).ProtoReflect().Descriptor())
	for _, k := range []string{"status", "attempt_id", "attemptId", "assigned_at", "exit_code", "synced"} {
		if sub, ok := keys[k]; !ok || sub != nil {
			t.Errorf("key %q: %v %v, want it dropped", k, sub, ok)
		}
	}
	for _, k := range []string{"id", "name", "command", "args", "priority", "max_retries", "maxRetries"} {
		if _, ok := keys[k]; ok {
			t.Errorf("key %q of the spec is dropped", k)
		}
	}
	// A message field of both, of different types, keeps what the
	// request's message has: a task's checkpoint drops all but enabled.
	task := readonlykeys.Between((&taskv1.Task{}).ProtoReflect().Descriptor(), (&taskv1.TaskSpec{}).ProtoReflect().Descriptor())
	if cp := task["checkpoint"]; cp == nil || cp["enabled"] != nil || len(cp) == 0 {
		t.Errorf("checkpoint subtree %v, want its read-only keys and not enabled", cp)
	} else if _, ok := cp["enabled"]; ok {
		t.Errorf("checkpoint's enabled is dropped")
	}
}

func TestDrop(t *testing.T) {
	keys := readonlykeys.Keys{"status": nil, "checkpoint": {"saved_at": nil}}
	for _, tc := range []struct {
		name, in, want string
		changed        bool
	}{
		{"top level and nested", `{"name":"a","status":"running","checkpoint":{"enabled":true,"saved_at":"x"}}`, `{"checkpoint":{"enabled":true},"name":"a"}`, true},
		{"nothing to drop", `{"name":"a"}`, `{"name":"a"}`, false},
		{"a name as a value only", `{"name":"status","args":["checkpoint"]}`, `{"name":"status","args":["checkpoint"]}`, false},
		{"a name spelt with an escape", `{"name":"a","st\u0061tus":"running"}`, `{"name":"a"}`, true},
		{"a nested name under its parent only", `{"saved_at":"x","checkpoint":{"saved_at":"y"}}`, `{"saved_at":"x","checkpoint":{}}`, true},
		{"unknown keys stay for the decoder", `{"colour":"red","status":1}`, `{"colour":"red"}`, true},
		{"not an object", `[1,2]`, `[1,2]`, false},
		{"malformed", `{"status":`, `{"status":`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed := readonlykeys.Drop([]byte(tc.in), keys)
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if !changed {
				if string(out) != tc.in {
					t.Errorf("unchanged body became %s", out)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(tc.want), &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Drop(%s) = %s, want %s", tc.in, out, tc.want)
			}
		})
	}
}
