package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func i32(v int32) *int32 { return &v }

// wantTask is a task a file must map to, field by field.
type wantTask struct {
	id    string
	where string
	spec  *taskv1.TaskSpec
}

// Example task files in every accepted form (docs/ctl.md#task-files): a
// single task, a stability test fanned out by targets or looping inside
// its command, and an agent's local queue with the state it recorded.
func TestParseExampleFiles(t *testing.T) {
	tests := []struct {
		file      string
		want      []wantTask
		wantNotes []string // substrings, one note each, in order
	}{
		{
			file: "single_task.yaml",
			want: []wantTask{{id: "task-train-001", where: "single_task.yaml:2", spec: &taskv1.TaskSpec{
				Name: "pytorch-train", Type: "python", Command: "python", Args: []string{"train.py", "--epochs=100"},
				Workdir: "/workspace", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
				Timeout: i32(86400), Priority: i32(3), MaxRetries: i32(3), RetryDelay: i32(60),
				MachineId: "machine-001", GroupId: "", ParentId: "", DependsOn: nil,
				LeaseTtlSec: i32(300), RenewIntervalSec: i32(60), HeartbeatIntervalSec: i32(30), GracePeriodSec: i32(30),
			}}},
		},
		{
			file: "stability_targets.yaml",
			want: []wantTask{{where: "stability_targets.yaml:2", spec: &taskv1.TaskSpec{
				Name: "stability-test", Type: "shell", Command: "bash", Args: []string{"-c", "./stress_test.sh"},
				Timeout: i32(3600), Priority: i32(3), RepeatCount: i32(1),
				Targets: &taskv1.Targets{MachineIds: []string{"machine-001", "machine-002"}},
			}}},
		},
		{
			file: "stability_inner_loop.yaml",
			want: []wantTask{{id: "task-stability-001", where: "stability_inner_loop.yaml:2", spec: &taskv1.TaskSpec{
				Name: "stability-test", Type: "shell", Command: "bash",
				Args:    []string{"-c", "for i in {1..1000}; do ./stress_test.sh || exit 1; done"},
				Timeout: i32(86400), Priority: i32(3),
			}}},
		},
		{
			file: "local_queue.yaml",
			want: []wantTask{
				{id: "task-train-001", where: "local_queue.yaml:7", spec: &taskv1.TaskSpec{
					Name: "pytorch-train", Type: "python", Command: "python", Args: []string{"train.py", "--epochs=100"},
					Workdir: "/workspace", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
					Timeout: i32(86400), Priority: i32(3), MaxRetries: i32(3), RetryDelay: i32(60),
					// The queue's machine: these tasks were queued there.
					MachineId: "machine-001",
				}},
				{id: "task-cleanup-002", where: "local_queue.yaml:33", spec: &taskv1.TaskSpec{
					Name: "cleanup-workdir", Type: "shell", Command: "bash", Args: []string{"-c", "rm -rf /workspace/tmp/*"},
					Workdir: "/workspace", Env: map[string]string{}, Timeout: i32(600), Priority: i32(5),
					MachineId: "machine-001",
				}},
			},
			wantNotes: []string{
				"local_queue.yaml:2: ignoring local_queue.agent_id, local_queue.updated_at",
				`local_queue.yaml:7: task "task-train-001": ignoring state fields status, attempt_id, assigned_agent_id, assigned_at, lease_expires_at, started_at, last_heartbeat_at, exit_code, error`,
				`local_queue.yaml:33: task "task-cleanup-002": ignoring state fields status, attempt_id, assigned_agent_id, assigned_at, lease_expires_at, started_at, last_heartbeat_at, exit_code, error`,
				"local_queue.yaml:2: tasks without machine_id target the queue's machine machine-001",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, notes, err := ParseTaskFile(tt.file, data)
			if err != nil {
				t.Fatalf("ParseTaskFile: %v", err)
			}
			assertTasks(t, got, tt.want)
			if len(notes) != len(tt.wantNotes) {
				t.Fatalf("notes = %q, want %d", notes, len(tt.wantNotes))
			}
			for i, w := range tt.wantNotes {
				if !strings.Contains(notes[i], w) {
					t.Errorf("note %d = %q, want it to contain %q", i, notes[i], w)
				}
			}
		})
	}
}

func assertTasks(t *testing.T, got []FileTask, want []wantTask) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tasks, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].ID != w.id {
			t.Errorf("task %d: id = %q, want %q", i, got[i].ID, w.id)
		}
		if w.where != "" && got[i].Where != w.where {
			t.Errorf("task %d: where = %q, want %q", i, got[i].Where, w.where)
		}
		if !proto.Equal(got[i].Spec, w.spec) {
			t.Errorf("task %d: spec\n got: %s\nwant: %s", i, prototext.Format(got[i].Spec), prototext.Format(w.spec))
		}
	}
}

func TestParseForms(t *testing.T) {
	tests := []struct {
		name, data string
		want       []wantTask
	}{
		{
			name: "bare task mapping",
			data: "name: probe\ntype: noop\npriority: 1\n",
			want: []wantTask{{spec: &taskv1.TaskSpec{Name: "probe", Type: "noop", Priority: i32(1)}}},
		},
		{
			name: "json",
			data: `{"task": {"id": "j1", "name": "j", "command": "echo", "args": ["a b"], "timeout": 5, "env": {"A": "1"}}}`,
			want: []wantTask{{id: "j1", spec: &taskv1.TaskSpec{Name: "j", Command: "echo", Args: []string{"a b"},
				Timeout: i32(5), Env: map[string]string{"A": "1"}}}},
		},
		{
			name: "several documents",
			data: "task: {name: a, command: x}\n---\ntask: {name: b, command: y}\n---\n",
			want: []wantTask{
				{where: "f.yaml:1", spec: &taskv1.TaskSpec{Name: "a", Command: "x"}},
				{where: "f.yaml:3", spec: &taskv1.TaskSpec{Name: "b", Command: "y"}},
			},
		},
		{
			name: "nulls are absent, zeros are kept",
			data: "task:\n  name: n\n  command: c\n  timeout: null\n  max_retries: 0\n  group_id: ~\n  args: null\n",
			want: []wantTask{{spec: &taskv1.TaskSpec{Name: "n", Command: "c", MaxRetries: i32(0)}}},
		},
		{
			name: "unquoted scalars keep their text",
			data: "task:\n  name: 42\n  command: c\n  machine_id: 007\n  env: {CUDA_VISIBLE_DEVICES: 0, EMPTY: , FLAG: true}\n",
			want: []wantTask{{spec: &taskv1.TaskSpec{Name: "42", Command: "c", MachineId: "007",
				Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0", "EMPTY": "", "FLAG": "true"}}}},
		},
		{
			name: "distribution and the remaining fields",
			data: `task:
  name: d
  command: c
  parent_id: p1
  group_id: g1
  depends_on: [a, b]
  queue: gpu
  distribution: {mode: scatter, labels: ["gpu:v100"], count: 3}
`,
			want: []wantTask{{spec: &taskv1.TaskSpec{Name: "d", Command: "c", ParentId: "p1", GroupId: "g1",
				DependsOn: []string{"a", "b"}, Queue: "gpu",
				Distribution: &taskv1.Distribution{Mode: "scatter", Labels: []string{"gpu:v100"}, Count: 3}}}},
		},
		{
			name: "a queue task's own placement wins over the queue's machine",
			data: `local_queue:
  machine_id: m-queue
  tasks:
    - {name: own, command: c, machine_id: m-own}
    - {name: targeted, command: c, targets: {ips: ["10.0.0.1"]}}
    - {name: inherits, command: c}
`,
			want: []wantTask{
				{spec: &taskv1.TaskSpec{Name: "own", Command: "c", MachineId: "m-own"}},
				{spec: &taskv1.TaskSpec{Name: "targeted", Command: "c", Targets: &taskv1.Targets{Ips: []string{"10.0.0.1"}}}},
				{spec: &taskv1.TaskSpec{Name: "inherits", Command: "c", MachineId: "m-queue"}},
			},
		},
		{
			name: "the document's webhook block",
			data: "task:\n  name: w\n  command: c\n  webhook:\n    url: \"https://example.com/webhook\"\n",
			want: []wantTask{{spec: &taskv1.TaskSpec{Name: "w", Command: "c", Webhook: &taskv1.Webhook{Url: "https://example.com/webhook"}}}},
		},
		{
			name: "anchors and aliases",
			data: "task:\n  name: a\n  command: c\n  args: &args [x, y]\n  depends_on: *args\n",
			want: []wantTask{{spec: &taskv1.TaskSpec{Name: "a", Command: "c", Args: []string{"x", "y"}, DependsOn: []string{"x", "y"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := ParseTaskFile("f.yaml", []byte(tt.data))
			if err != nil {
				t.Fatalf("ParseTaskFile: %v", err)
			}
			assertTasks(t, got, tt.want)
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, data string
		want       string // the whole error
	}{
		{"unknown key with line", "task:\n  name: x\n  command: c\n  prority: 3\n",
			`f.yaml:4: unknown key "prority" in task (did you mean "priority"?)`},
		{"unknown key far from anything", "task:\n  name: x\n  gpu_memory: 3\n",
			`f.yaml:3: unknown key "gpu_memory" in task`},
		{"unknown key in a queue task", "local_queue:\n  tasks:\n    - name: a\n      command: c\n      commnd: d\n",
			`f.yaml:5: unknown key "commnd" in local_queue.tasks[0] (did you mean "command"?)`},
		{"unknown key of the queue", "local_queue:\n  agent: a\n  tasks: []\n",
			`f.yaml:2: unknown key "agent" in local_queue`},
		{"unknown key in targets", "task:\n  name: x\n  targets:\n    machine_id: [a]\n",
			`f.yaml:4: unknown key "machine_id" in task.targets (did you mean "machine_ids"?)`},
		{"unknown key in distribution", "task:\n  name: x\n  distribution: {mode: single, label: [a]}\n",
			`f.yaml:3: unknown key "label" in task.distribution (did you mean "labels"?)`},
		{"unknown key in webhook", "task:\n  name: x\n  webhook: {uri: \"https://x/\"}\n",
			`f.yaml:3: unknown key "uri" in task.webhook (did you mean "url"?)`},
		{"key beside task", "task: {name: x}\nname: y\n",
			`f.yaml:2: unknown key "name" beside task (a file holds task: {…} alone)`},
		{"quoted number", "task:\n  name: x\n  timeout: \"1h\"\n",
			`f.yaml:3: task.timeout: want a whole number, got string "1h"`},
		{"fractional number", "task:\n  name: x\n  priority: 2.5\n",
			`f.yaml:3: task.priority: want a whole number, got number 2.5`},
		{"number out of range", "task:\n  name: x\n  timeout: 99999999999\n",
			`f.yaml:3: task.timeout: 99999999999 is out of range`},
		{"boolean for a number", "task:\n  name: x\n  max_retries: yes\n",
			`f.yaml:3: task.max_retries: want a whole number, got string "yes"`},
		{"string for a list", "task:\n  name: x\n  args: \"train.py --epochs=100\"\n",
			`f.yaml:3: task.args: want a list of strings, got string "train.py --epochs=100"`},
		{"nested list item", "task:\n  name: x\n  depends_on:\n    - [a]\n",
			`f.yaml:4: task.depends_on[0]: want a string, got a list`},
		{"list for env", "task:\n  name: x\n  env: [A=1]\n",
			`f.yaml:3: task.env: want a mapping of names to values, got a list`},
		{"mapping for a string", "task:\n  name: {first: x}\n",
			`f.yaml:2: task.name: want a string, got a mapping`},
		{"list for targets", "task:\n  name: x\n  targets: [m1]\n",
			`f.yaml:3: task.targets: want a mapping with machine_ids and ips, got a list`},
		{"priority out of range", "task:\n  name: x\n  priority: 99\n",
			`f.yaml:3: task.priority: 99 is out of range (1 to 10)`},
		{"timeout out of range", "name: x\ntimeout: 0\n",
			`f.yaml:2: timeout: 0 is out of range (1 to 604800)`},
		{"max_retries out of range in a queue", "local_queue:\n  tasks:\n    - {name: a, max_retries: 101}\n",
			`f.yaml:3: local_queue.tasks[0].max_retries: 101 is out of range (0 to 100)`},
		{"retry_delay out of range in a later document", "task: {name: a}\n---\ntask: {name: b, retry_delay: -1}\n",
			`f.yaml:3: task.retry_delay: -1 is out of range (0 to 86400)`},
		{"duplicate key", "task:\n  name: x\n  priority: 1\n  priority: 2\n",
			`f.yaml:4: duplicate key "task.priority" (first at line 3)`},
		{"top-level list", "- name: x\n",
			`f.yaml:1: want a mapping (task: {…}, local_queue: {…} or a task), got a list`},
		{"mistyped task", "taks:\n  name: x\n  command: echo\n",
			`f.yaml:1: unknown key "taks" at the top level (did you mean "task"?)`},
		{"mistyped local_queue", "local_queu:\n  tasks: []\n",
			`f.yaml:1: unknown key "local_queu" at the top level (did you mean "local_queue"?)`},
		{"a bare task's typo is the task's", "name: x\ncomand: echo\n",
			`f.yaml:2: unknown key "comand" in task (did you mean "command"?)`},
		{"task groups", "group:\n  mode: serial\n  tasks: []\n",
			`f.yaml:1: "group" files are task groups: submit them with ctl groups submit -f FILE`},
		{"queue without tasks", "local_queue:\n  agent_id: a\n",
			`f.yaml:2: local_queue has no tasks`},
		{"task without a name", "task:\n  command: c\n", `f.yaml:2: task: has no name (name: is required)`},
		{"bare task without a name", "command: c\n", `f.yaml:1: the task: has no name (name: is required)`},
		{"queue task without a name", "local_queue:\n  tasks:\n    - name: a\n    - {command: c}\n",
			`f.yaml:4: local_queue.tasks[1]: has no name (name: is required)`},
		{"empty file", "", `f.yaml: no task in file (want task: {…}, local_queue: {tasks: […]} or a task mapping)`},
		{"syntax error", "task:\n\tname: x\n", `f.yaml:2:1: found character that cannot start any token`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseTaskFile("f.yaml", []byte(tt.data))
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q\n want %q", err, tt.want)
			}
		})
	}
}

// A row of the agent's own task list (ListLocalTasks,
// docs/api/agent-local.md#localtask), as its local API shows it, reads as
// a local_queue task: every field is a task key or a state field ignored
// with a note.
func TestParseLocalQueueFromAgentList(t *testing.T) {
	now := timestamppb.Now()
	row := &agentv1.LocalTask{Id: "t-1", Name: "lqc", Type: "shell", Command: "echo", Args: []string{"a"},
		Env: map[string]string{"A": "1"}, Timeout: 3600, Priority: 5, Status: "completed", AttemptId: "at-1",
		AssignedAgentId: "agent-1", LeaseExpiresAt: now, ExitCode: proto.Int32(0), Stdout: "a\n", Error: proto.String("x"),
		ReceivedAt: now, AssignedAt: now, StartedAt: now, EndedAt: now, Synced: true, Origin: "server", Progress: 100,
		LastHeartbeatAt: now, MaxRetries: 3, RetryDelay: 60, RetryCount: 1, RetryAt: now, GracePeriodSec: 30,
		SyncNote: proto.String("complete task rejected by the server: 30003 lease expired")}
	js, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	// Every field of LocalTask is set above, so a field added later that
	// the parser does not know fails here.
	var fields map[string]any
	if err := json.Unmarshal(js, &fields); err != nil {
		t.Fatal(err)
	}
	if n := row.ProtoReflect().Descriptor().Fields().Len(); len(fields) != n {
		t.Fatalf("the row shows %d fields, LocalTask has %d", len(fields), n)
	}
	file := `{"local_queue": {"machine_id": "m-1", "updated_at": "2026-12-02T03:58:01Z", "tasks": [` + string(js) + `]}}`
	tasks, notes, err := ParseTaskFile("lq.json", []byte(file))
	if err != nil {
		t.Fatalf("ParseTaskFile: %v", err)
	}
	assertTasks(t, tasks, []wantTask{{id: "t-1", spec: &taskv1.TaskSpec{Name: "lqc", Type: "shell", Command: "echo",
		Args: []string{"a"}, Env: map[string]string{"A": "1"}, Timeout: i32(3600), Priority: i32(5),
		MaxRetries: i32(3), RetryDelay: i32(60), MachineId: "m-1", GracePeriodSec: i32(30)}}})
	all := strings.Join(notes, "\n")
	for _, f := range []string{"origin", "progress", "retry_at", "received_at", "synced", "exit_code"} {
		if !strings.Contains(all, f) {
			t.Errorf("no note names %s:\n%s", f, all)
		}
	}
	// A queue's own rows may carry updated_at, as the queue does.
	if _, _, err := ParseTaskFile("lq.yaml", []byte("local_queue:\n  tasks:\n    - {name: a, command: c, updated_at: x}\n")); err != nil {
		t.Errorf("a task's updated_at: %v", err)
	}
}

// Syntax errors name the line (and column) the problem is on, in YAML and
// in JSON, for task and group files alike; yaml.v3's own messages name
// the line before. A file named *.json is strict JSON.
func TestParseSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, file, data string
		want             string // the whole error
	}{
		{"tab in the indentation after a scalar", "f.yaml", "\n\n\n\ntask:\n  name: x\n\tcommand: echo\n",
			"f.yaml:7:1: found a tab character that violates indentation"},
		{"tab as the first indentation", "f.yaml", "task:\n\tname: x\n",
			"f.yaml:2:1: found character that cannot start any token"},
		{"key indented less than its siblings", "f.yaml", "task:\n  name: x\n  command: echo\n bad: indent\n",
			"f.yaml:4:2: did not find expected key"},
		{"key indented more than its siblings", "f.yaml", "task:\n  name: x\n    command: echo\n",
			"f.yaml:3:12: mapping values are not allowed in this context"},
		{"unclosed list", "f.yaml", "task:\n  name: x\n  command: echo\n  args: [a, b\n\n\n# end\n",
			"f.yaml:4:9: a flow sequence started here is not closed by the end of the file (did not find expected ',' or ']')"},
		{"unclosed quote", "f.yaml", "task:\n  name: x\n  env:\n    A: \"open\n",
			"f.yaml:4:8: a quoted scalar started here is not closed by the end of the file (found unexpected end of stream)"},
		{"a second document", "f.yaml", "task: {name: a, command: x}\n---\ntask:\n  name: b\n  args: [a\n  command: y\n",
			"f.yaml:6:10: did not find expected ',' or ']'"},
		{"yaml-style json read as yaml from stdin", "<stdin>", "{\"task\": {\"name\": \"x\", \"command\": \"echo\",}}",
			""},
		{"json: trailing comma", "f.json", "{\n  \"task\": {\n    \"name\": \"x\",\n    \"command\": \"echo\",\n  }\n}\n",
			"f.json:4:22: trailing comma before '}' (JSON allows none)"},
		{"json: trailing comma in a list", "f.json", "{\"task\": {\"name\": \"x\", \"args\": [\"a\",]}}",
			"f.json:1:36: trailing comma before ']' (JSON allows none)"},
		{"json: comment", "f.json", "{\n  \"task\": {\"name\": \"x\"} // the task\n}\n",
			"f.json:2:25: invalid character '/' after object key:value pair (JSON has no comments)"},
		{"json: single quotes", "f.json", "{\"task\": {\"name\": 'x'}}",
			"f.json:1:19: invalid character '\\'' looking for beginning of value (JSON strings take double quotes)"},
		{"json: unclosed brace", "f.json", "{\n  \"task\": {\n    \"name\": \"x\",\n    \"command\": \"echo\"\n  \n",
			"f.json:2:11: '{' opened here is not closed by the end of the file"},
		{"json: missing colon", "f.json", "{\"task\": {\"name\" \"x\"}}",
			"f.json:1:18: invalid character '\"' after object key"},
		{"json: unknown key keeps its line", "f.json", "{\n  \"task\": {\n    \"name\": \"x\",\n    \"prority\": 3\n  }\n}\n",
			`f.json:4: unknown key "prority" in task (did you mean "priority"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseTaskFile(tt.file, []byte(tt.data))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\n want %s", err, tt.want)
			}
		})
	}
	groupTests := []struct{ name, file, data, want string }{
		{"unclosed list in a member", "g.yaml", "group:\n  mode: serial\n  tasks:\n    - name: a\n      args: [x\n",
			"g.yaml:5:13: a flow sequence started here is not closed by the end of the file (did not find expected ',' or ']')"},
		{"tab in a group", "g.yaml", "group:\n  mode: serial\n\ttasks: []\n",
			"g.yaml:3:1: found a tab character that violates indentation"},
		{"json trailing comma", "g.json", "{\"group\": {\"tasks\": [{\"name\": \"a\", \"command\": \"b\"},]}}",
			"g.json:1:51: trailing comma before ']' (JSON allows none)"},
	}
	for _, tt := range groupTests {
		t.Run("group "+tt.name, func(t *testing.T) {
			_, err := ParseGroupFile(tt.file, []byte(tt.data))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\n want %s", err, tt.want)
			}
		})
	}
}

// Aliases are read as the nodes they name, so m aliases of a node that
// holds an alias of n values are m*n values: a file of a few kilobytes
// built that way must be refused at its line, not expanded (which took
// memory growing with the square of the file's size), in task, group and
// template files alike.
func TestAliasExpansionIsBounded(t *testing.T) {
	rep := strings.Repeat
	const limit = "aliases expand the document by more than 100000 nodes (the limit)"
	parse := map[string]func(data string) error{
		"task":     func(data string) error { _, _, err := ParseTaskFile("f.yaml", []byte(data)); return err },
		"group":    func(data string) error { _, err := ParseGroupFile("f.yaml", []byte(data)); return err },
		"template": func(data string) error { _, err := ParseTemplateFile("f.yaml", []byte(data)); return err },
	}
	tests := []struct {
		name, parser, data string
		want               string // the error's start; "" for none
	}{
		{"task file: aliases of a task with aliased args", "task",
			"local_queue:\n  tasks: [&t {name: n, args: &a [" + rep("x, ", 3000) + "x]}" + rep(", *t", 3000) + "]\n",
			"f.yaml:2:"},
		{"group file: aliases of a member with aliased args", "group",
			"group:\n  mode: parallel\n  tasks: [&t {name: n, command: c, args: &a [" + rep("x, ", 3000) + "x]}" + rep(", *t", 3000) + "]\n",
			"f.yaml:3:"},
		{"template file: aliases of a variable with aliased options", "template",
			"id: t\nvariables: [&v {name: v, type: select, options: [" + rep("x, ", 3000) + "x]}" + rep(", *v", 3000) + "]\n",
			"f.yaml:2:"},
		{"an alias inside the node it names", "task",
			"task: {name: x, args: &a [*a]}\n",
			"f.yaml:1:27: alias *a is inside the node it names, which would never end"},
		{"shared env in a thousand tasks stays within the limit", "task",
			"local_queue:\n  tasks:\n    - {name: t0, env: &env {" + envPairs(20) + "}}\n" + rep("    - {name: t, env: *env}\n", 1000),
			""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The guard turns a regression into a failure rather than a
			// test that runs until the package's timeout.
			done := make(chan error, 1)
			go func() { done <- parse[tt.parser](tt.data) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("parsing did not end")
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("no error, want %s…", tt.want)
			case !strings.HasPrefix(err.Error(), tt.want):
				t.Fatalf("error = %v\n want %s…", err, tt.want)
			case !strings.Contains(tt.want, "alias") && !strings.HasSuffix(err.Error(), limit):
				t.Fatalf("error = %v\n want it to end %q", err, limit)
			}
		})
	}
}

// envPairs is n distinct env entries, for a flow mapping.
func envPairs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "K%d: v%d", i, i)
	}
	return b.String()
}

// -f - reads standard input, once, and names it <stdin> in messages.
func TestReadTaskFilesFromStdin(t *testing.T) {
	single, err := os.ReadFile("testdata/single_task.yaml")
	if err != nil {
		t.Fatal(err)
	}
	queue := "testdata/local_queue.yaml"
	a := testApp()
	cmd := &cobra.Command{Use: "submit"}
	var stderr bytes.Buffer
	cmd.SetIn(bytes.NewReader(single))
	cmd.SetErr(&stderr)
	tasks, err := a.readTaskFiles(cmd, []string{"-", queue})
	if err != nil {
		t.Fatal(err)
	}
	var ids, wheres []string
	for _, task := range tasks {
		ids = append(ids, task.ID)
		wheres = append(wheres, task.Where)
	}
	if got := strings.Join(ids, ","); got != "task-train-001,task-train-001,task-cleanup-002" {
		t.Errorf("ids = %s", got)
	}
	if wheres[0] != "<stdin>:2" {
		t.Errorf("stdin task at %q", wheres[0])
	}
	if n := strings.Count(stderr.String(), "note: "); n != 4 {
		t.Errorf("stderr has %d notes, want 4:\n%s", n, stderr.String())
	}

	_, err = a.readTaskFiles(cmd, []string{"-", "-"})
	if ExitCode(err) != ExitUsage {
		t.Errorf("-f - twice: %v, want a usage error", err)
	}

	cmd.SetIn(strings.NewReader("task:\n  name: x\n  colour: red\n"))
	_, err = a.readTaskFiles(cmd, []string{"-"})
	if err == nil || err.Error() != `<stdin>:3: unknown key "colour" in task` {
		t.Errorf("error = %v", err)
	}
}

func TestApplyRequestID(t *testing.T) {
	one := []FileTask{{ID: "from-file"}}
	applyRequestID(one, "r")
	if one[0].ID != "r" {
		t.Errorf("single task id = %q", one[0].ID)
	}
	several := []FileTask{{ID: "a"}, {}}
	applyRequestID(several, "r")
	if several[0].ID != "r-1" || several[1].ID != "r-2" {
		t.Errorf("ids = %q, %q", several[0].ID, several[1].ID)
	}
	kept := []FileTask{{ID: "a"}}
	applyRequestID(kept, "")
	if kept[0].ID != "a" {
		t.Errorf("no --request-id changed the id to %q", kept[0].ID)
	}
}
