package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// The group forms of the task-queue design, verbatim.
const (
	serialFile = `group:
  mode: serial
  tasks:
    - name: "下载数据"
      command: "wget http://..."
    - name: "处理数据"
      command: "python process.py"
    - name: "上传结果"
      command: "aws s3 cp ..."
`
	parallelFile = `group:
  mode: parallel
  tasks:
    - name: "处理分片1"
      command: "python process.py --shard=1"
    - name: "处理分片2"
      command: "python process.py --shard=2"
    - name: "处理分片3"
      command: "python process.py --shard=3"
`
	dagFile = `group:
  mode: dag
  tasks:
    - id: download
      name: "下载数据"
      command: "wget http://..."
    - id: process1
      name: "处理分片1"
      command: "python process.py --shard=1"
      depends_on: [download]
    - id: process2
      name: "处理分片2"
      command: "python process.py --shard=2"
      depends_on: [download]
    - id: merge
      name: "合并结果"
      command: "python merge.py"
      depends_on: [process1, process2]
`
	repeatFile = `repeat:
  count: 100
  parallel: 5
  interval_sec: 10
  max_failures: 5
  backoff_sec: 30
  circuit_breaker_threshold: 3
  template:
    name: "stability-test"
    type: "shell"
    command: "bash"
    args: ["-c", "./stress_test.sh"]
    timeout: 1800
`
)

func TestParseGroupFileForms(t *testing.T) {
	for name, src := range map[string]string{"serial": serialFile, "parallel": parallelFile, "dag": dagFile} {
		gs, err := ParseGroupFile(name+".yaml", []byte(src))
		if err != nil || len(gs) != 1 {
			t.Fatalf("%s: %v", name, err)
		}
		r := gs[0].Request
		if r.GetMode() != name || len(r.GetTasks()) != map[string]int{"serial": 3, "parallel": 3, "dag": 4}[name] {
			t.Fatalf("%s: %v", name, r)
		}
	}
	gs, _ := ParseGroupFile("dag.yaml", []byte(dagFile))
	merge := gs[0].Request.GetTasks()[3]
	if merge.GetId() != "merge" || !slices.Equal(merge.GetDependsOn(), []string{"process1", "process2"}) || merge.GetCommand() != "python merge.py" {
		t.Fatalf("merge = %v", merge)
	}
	gs, err := ParseGroupFile("repeat.yaml", []byte(repeatFile))
	if err != nil {
		t.Fatal(err)
	}
	rp := gs[0].Request.GetRepeat()
	if rp.GetCount() != 100 || rp.GetParallel() != 5 || rp.GetIntervalSec() != 10 || rp.GetMaxFailures() != 5 || rp.GetBackoffSec() != 30 ||
		rp.GetCircuitBreakerThreshold() != 3 || rp.GetTemplate().GetTimeout() != 1800 || !slices.Equal(rp.GetTemplate().GetArgs(), []string{"-c", "./stress_test.sh"}) {
		t.Fatalf("repeat = %v", rp)
	}
	// Members may name templates with typed variables.
	gs, err = ParseGroupFile("t.yaml", []byte("group:\n  mode: parallel\n  start: false\n  tasks:\n    - template_id: train\n      variables: {model: bert, epochs: 3, amp: true}\n      priority: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := gs[0].Request.GetTasks()[0]
	if m.GetTemplateId() != "train" || m.GetVariables()["model"].GetStringValue() != "bert" || m.GetVariables()["epochs"].GetNumberValue() != 3 ||
		!m.GetVariables()["amp"].GetBoolValue() || m.GetPriority() != 2 || gs[0].Request.GetStart() {
		t.Fatalf("member = %v", m)
	}
}

// webhook: is read on a group, on each member and on a repeat (and its
// template, a task mapping).
func TestParseGroupFileWebhooks(t *testing.T) {
	src := "group:\n  mode: parallel\n  webhook: {url: https://example.com/group}\n  tasks:\n" +
		"    - {name: a, command: b}\n" +
		"    - name: c\n      command: d\n      webhook:\n        url: https://example.com/member\n" +
		"---\nrepeat:\n  count: 3\n  webhook: {url: https://example.com/repeat}\n" +
		"  template: {name: r, command: x, webhook: {url: https://example.com/run}}\n"
	gs, err := ParseGroupFile("w.yaml", []byte(src))
	if err != nil || len(gs) != 2 {
		t.Fatalf("%d groups, %v", len(gs), err)
	}
	g, rp := gs[0].Request, gs[1].Request
	if g.GetWebhook().GetUrl() != "https://example.com/group" {
		t.Fatalf("group webhook = %v", g.GetWebhook())
	}
	if g.GetTasks()[0].GetWebhook() != nil || g.GetTasks()[1].GetWebhook().GetUrl() != "https://example.com/member" {
		t.Fatalf("members = %v", g.GetTasks())
	}
	if rp.GetWebhook().GetUrl() != "https://example.com/repeat" || rp.GetRepeat().GetTemplate().GetWebhook().GetUrl() != "https://example.com/run" {
		t.Fatalf("repeat = %v", rp)
	}
	// webhook: null is no webhook.
	gs, err = ParseGroupFile("n.yaml", []byte("group:\n  webhook: null\n  tasks: [{name: a, command: b, webhook: ~}]\n"))
	if err != nil || gs[0].Request.GetWebhook() != nil || gs[0].Request.GetTasks()[0].GetWebhook() != nil {
		t.Fatalf("null webhook: %v %v", gs, err)
	}
}

func TestParseGroupFileErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown key", "group:\n  mode: dag\n  taks: []\n", `g.yaml:3: unknown key "taks" in group (did you mean "tasks"?)`},
		{"member key", "group:\n  tasks:\n    - name: a\n      comand: x\n", `g.yaml:4: unknown key "comand" in group.tasks[0] (did you mean "command"?)`},
		{"mistyped group", "gruop:\n  tasks: [{name: a, command: b}]\n", `g.yaml:1: unknown key "gruop" at the top level (did you mean "group"?)`},
		{"mistyped repeat", "repaet: {count: 2, template: {name: a, command: b}}\n", `g.yaml:1: unknown key "repaet" at the top level (did you mean "repeat"?)`},
		{"member priority out of range", "group:\n  tasks:\n    - {name: a, command: b, priority: 0}\n", "g.yaml:3: group.tasks[0].priority: 0 is out of range (1 to 10)"},
		{"repeat timeout out of range", "repeat:\n  count: 2\n  template: {name: a, command: b, timeout: 604801}\n", "g.yaml:3: repeat.template.timeout: 604801 is out of range (1 to 604800)"},
		{"no tasks", "group:\n  mode: serial\n", "g.yaml:2: group has no tasks"},
		{"tasks not a list", "group:\n  tasks: {a: 1}\n", "g.yaml:2: group.tasks: want a list of tasks"},
		{"beside", "group:\n  tasks: []\nrepeat: {}\n", "alone per document"},
		{"task file", "task:\n  name: a\n", "g.yaml:1: a group file holds group"},
		{"repeat without count", "repeat:\n  template: {name: a, command: b}\n", "g.yaml:2: repeat has no count"},
		{"repeat without task", "repeat:\n  count: 3\n", "neither a template"},
		{"targets in a member", "group:\n  tasks:\n    - name: a\n      command: b\n      targets: {machine_ids: [m1]}\n", "g.yaml:3: group.tasks[0]: targets"},
		{"start not a bool", "group:\n  start: no way\n  tasks: [{name: a, command: b}]\n", "g.yaml:2: group.start: want true or false"},
		{"webhook a bare url", "group:\n  webhook: https://x/\n  tasks: [{name: a, command: b}]\n", "g.yaml:2: group.webhook: want {url: …}"},
		{"webhook without url", "group:\n  webhook: {}\n  tasks: [{name: a, command: b}]\n", "g.yaml:2: group.webhook: url is missing"},
		{"webhook unknown key", "group:\n  webhook: {uri: https://x/}\n  tasks: [{name: a, command: b}]\n", `g.yaml:2: unknown key "uri" in group.webhook (did you mean "url"?)`},
		{"webhook url not a string", "group:\n  webhook: {url: [a]}\n  tasks: [{name: a, command: b}]\n", "g.yaml:2: group.webhook.url"},
		{"member webhook a list", "group:\n  tasks:\n    - name: a\n      command: b\n      webhook: [https://x/]\n", "g.yaml:5: group.tasks[0].webhook: want {url: …}"},
		{"member webhook without url", "group:\n  tasks:\n    - name: a\n      command: b\n      webhook: {url: \"\"}\n", "g.yaml:5: group.tasks[0].webhook: url is missing"},
		{"repeat webhook unknown key", "repeat:\n  count: 2\n  webhook: {ur: https://x/}\n  template: {name: a, command: b}\n", `g.yaml:3: unknown key "ur" in repeat.webhook (did you mean "url"?)`},
		{"repeat webhook a number", "repeat:\n  count: 2\n  webhook: 3\n  template: {name: a, command: b}\n", "g.yaml:3: repeat.webhook: want {url: …}"},
	}
	for _, tt := range tests {
		_, err := ParseGroupFile("g.yaml", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestGroupTreeDepths(t *testing.T) {
	gs, _ := ParseGroupFile("dag.yaml", []byte(dagFile))
	var members []*taskv1.TaskGroupMember
	for _, m := range gs[0].Request.GetTasks() {
		members = append(members, &taskv1.TaskGroupMember{Id: m.GetId(), DependsOn: m.GetDependsOn(), Status: "pending"})
	}
	var got []string
	for _, l := range groupTree(members) {
		got = append(got, strings.Repeat(">", l.depth)+l.member.GetId())
	}
	if !slices.Equal(got, []string{"download", ">process1", ">process2", ">>merge"}) {
		t.Fatalf("tree = %v", got)
	}
	// Drawn, a member that another of its depth follows opens a branch,
	// the last of its depth closes it.
	var b bytes.Buffer
	if err := writeTree(&b, groupTree(members)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n├─ process1 ", "\n└─ process2 ", "\n  └─ merge "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the drawn tree has no %q:\n%s", want, b.String())
		}
	}
}

func TestCounted(t *testing.T) {
	if got := counted(1, "task") + ", " + counted(0, "task") + ", " + counted(3, "task"); got != "1 task, 0 tasks, 3 tasks" {
		t.Errorf("counted: %s", got)
	}
}

// A dag group from a file through the real gateway: submit, the agent
// runs it (here the lease API), watch ends 0 with the tree; the breaker
// reset needs an operator key.
func TestGroupsCommands(t *testing.T) {
	s := newStack(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "dag.yaml")
	if err := os.WriteFile(file, []byte(dagFile), 0o600); err != nil {
		t.Fatal(err)
	}
	out := ok(t, s.ctl(t, "groups", "submit", "-f", file, "-o", "json")).stdout
	var created map[string]any
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("submit output %s: %v", out, err)
	}
	id, _ := created["id"].(string)
	if id == "" || created["status"] != "running" {
		t.Fatalf("submit output %s", out)
	}
	// One group, nothing after it: printed as `groups get -o json` prints
	// it, over several lines.
	if strings.Count(strings.TrimSpace(out), "\n") == 0 {
		t.Errorf("one created group is printed compact:\n%s", out)
	}
	done := make(chan result, 1)
	go func() { done <- s.ctl(t, "groups", "watch", id) }()
	ctx := context.Background()
	for claimed := 0; claimed < 4; {
		resp, err := s.lease.ClaimTasks(ctx, &taskv1.ClaimTasksRequest{AgentId: agentID, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range resp.GetTasks() {
			claimed++
			if _, err := s.lease.CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: task.GetId(), AgentId: agentID,
				AttemptId: task.GetAttemptId()}); err != nil {
				t.Fatal(err)
			}
		}
		if len(resp.GetTasks()) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var w result
	select {
	case w = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end")
	}
	ok(t, w)
	if !strings.Contains(w.stdout, "└─ merge") || !strings.Contains(w.stdout, "4/4 completed") {
		t.Fatalf("watch output:\n%s", w.stdout)
	}
	get := ok(t, s.ctl(t, "groups", "get", id)).stdout
	if !strings.Contains(get, "completed") || !strings.Contains(get, "4/4 completed") || !strings.Contains(get, "└─ merge") {
		t.Fatalf("get:\n%s", get)
	}
	if list := ok(t, s.ctl(t, "groups", "list", "--mode", "dag")).stdout; !strings.Contains(list, id) {
		t.Fatalf("list:\n%s", list)
	}
	// The reset is for operators: a tenant's key is refused by the gateway.
	fails(t, testApp(EnvServer, s.gw.GRPCAddr(), EnvAdminKey, s.apiKey).run(t, "", "groups", "reset", id, "--reason", "x"), "permission denied")
	if r := s.ctl(t, "groups", "reset", id); r.code != ExitUsage {
		t.Fatalf("reset without --reason: exit %d", r.code)
	}
	ok(t, s.ctl(t, "groups", "delete", id))
	fails(t, s.ctl(t, "groups", "get", id), "30004")
}

// A template file reads its keys against TaskTemplate and TemplateVar:
// the example of docs/ctl.md maps field by field, and a wrong key or type
// is named at the file's line with its key path and a "did you mean".
func TestParseTemplateFile(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/ctl.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Template files")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/ctl.md has no template file example")
	}
	got, err := ParseTemplateFile("t.yaml", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	want := &taskv1.TaskTemplate{Id: "train", Name: "train", Command: "python",
		Args: []string{"train.py", "--model={{model}}", "--epochs={{epochs}}"}, Workdir: "/workspace", Category: "training",
		Variables: []*taskv1.TemplateVar{
			{Name: "model", Type: "select", Options: []string{"resnet50", "vit"}, Required: true},
			{Name: "epochs", Type: "int", Default: "10"},
		}}
	if !proto.Equal(got, want) {
		t.Fatalf("template\n got: %v\nwant: %v", got, want)
	}
	// JSON, camelCase names and a template as get -o json shows it.
	got, err = ParseTemplateFile("t.json", []byte(`{"id": "j", "command": "c", "createdAt": "2026-01-02T03:04:05Z", "created_by": "k",
  "variables": [{"name": "on", "type": "bool", "default": true}], "checkpoint": {"enabled": true}, "priority": 3}`))
	if err != nil || got.GetVariables()[0].GetDefault() != "true" || !got.GetCheckpoint().GetEnabled() ||
		got.GetCreatedAt().AsTime().Year() != 2026 || got.GetPriority() != 3 {
		t.Fatalf("json template = %v, %v", got, err)
	}

	tests := []struct{ name, src, want string }{
		{"unknown key", "id: t\nname: t\ncomand: echo\n", `t.yaml:3: unknown key "comand" in template (did you mean "command"?)`},
		{"unknown key of a variable", "id: t\ncommand: echo\nargs: [\"{{x}}\"]\nvariables:\n  - name: x\n    type: string\n    defualt: a\n",
			`t.yaml:7: unknown key "defualt" in variables[0] (did you mean "default"?)`},
		{"unknown key in a flow mapping", "id: vt2\nname: vt2\ncommand: echo\nargs: [\"{{x}}\"]\nvariables:\n  - {name: x, type: string, required: true, defualt: a}\n",
			`t.yaml:6: unknown key "defualt" in variables[0] (did you mean "default"?)`},
		{"unknown key far from anything", "id: t\ngpu_memory: 3\n", `t.yaml:2: unknown key "gpu_memory" in template`},
		{"quoted number", "id: t\ntimeout: \"1h\"\n", `t.yaml:2: timeout: want a whole number, got string "1h"`},
		{"out of range", "id: t\npriority: 99999999999\n", `t.yaml:2: priority: 99999999999 is out of range`},
		{"string for a list", "id: t\nargs: a b\n", `t.yaml:2: args: want a list, got string "a b"`},
		{"mapping in a list", "id: t\ntags:\n  - {a: b}\n", `t.yaml:3: tags[0]: want a single value, got a mapping`},
		{"bool for required", "id: t\nvariables:\n  - {name: x, required: maybe}\n", `t.yaml:3: variables[0].required: want true or false, got string "maybe"`},
		{"variables a mapping", "id: t\nvariables: {x: 1}\n", `t.yaml:2: variables: want a list, got a mapping`},
		{"duplicate key", "id: t\nid: u\n", `t.yaml:2: duplicate key "id" (first at line 1)`},
		{"two documents", "id: t\n---\nid: u\n", `t.yaml:3: a template file holds one template (a second document starts here)`},
		{"a list", "- id: t\n", `t.yaml:1: template: want a mapping, got a list`},
		{"empty", "", `t.yaml: no template in file`},
		{"syntax", "id: t\nargs: [a\n", `t.yaml:2:7: a flow sequence started here is not closed by the end of the file (did not find expected ',' or ']')`},
		{"bad timestamp", "id: t\ncreated_at: yesterday\n", `t.yaml: not a template: invalid google.protobuf.Timestamp value "yesterday"`},
	}
	for _, tt := range tests {
		if _, err := ParseTemplateFile("t.yaml", []byte(tt.src)); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\n want %s", tt.name, err, tt.want)
		}
	}
	if _, err := ParseTemplateFile("t.json", []byte(`{"id": "t", "args": ["a",]}`)); err == nil || err.Error() != "t.json:1:25: trailing comma before ']' (JSON allows none)" {
		t.Errorf("json trailing comma: %v", err)
	}
}

func TestTemplatesCommands(t *testing.T) {
	s := newStack(t)
	file := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(file, []byte(`id: "train-pytorch"
name: "PyTorch 训练任务"
description: "使用 PyTorch 进行模型训练"
command: "python"
args: ["train.py", "--model", "{{model}}", "--epochs", "{{epochs}}"]
workdir: "/workspace"
env:
  CUDA_VISIBLE_DEVICES: "{{gpu_id}}"
timeout: 86400
priority: 5
variables:
  - name: model
    type: select
    required: true
    options: ["resnet50", "vgg16", "bert"]
  - name: epochs
    type: int
    default: 100
  - name: gpu_id
    type: string
    default: "0"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, []byte("id: typo\ncommand: echo\nvariables:\n  - {name: x, type: string, defualt: a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, s.ctl(t, "templates", "create", "-f", typo), typo+`:4: unknown key "defualt" in variables[0] (did you mean "default"?)`)
	ok(t, s.ctl(t, "templates", "create", "-f", file))
	fails(t, s.ctl(t, "templates", "create", "-f", file), "30006")
	if got := ok(t, s.ctl(t, "templates", "get", "train-pytorch")).stdout; !strings.Contains(got, "select, required, one of resnet50|vgg16|bert") {
		t.Fatalf("get:\n%s", got)
	}
	if got := ok(t, s.ctl(t, "templates", "list")).stdout; !strings.Contains(got, "train-pytorch") || !strings.Contains(got, "model, epochs, gpu_id") {
		t.Fatalf("list:\n%s", got)
	}
	fails(t, s.ctl(t, "templates", "run", "train-pytorch", "--var", "model=gpt"), "variables.model")
	fails(t, s.ctl(t, "templates", "run", "train-pytorch", "--var", "model=bert", "--var", "epochs=ten"), "variables.epochs")
	fails(t, s.ctl(t, "templates", "run", "train-pytorch", "--var", "model=bert", "--var", "lr=1"), "variables.lr")
	id := strings.TrimSpace(ok(t, s.ctl(t, "templates", "run", "train-pytorch", "--var", "model=bert", "--var", "epochs=3",
		"--priority", "2")).stdout)
	task := s.getTask(t, id)
	if !slices.Equal(task.GetArgs(), []string{"train.py", "--model", "bert", "--epochs", "3"}) || task.GetEnv()["CUDA_VISIBLE_DEVICES"] != "0" ||
		task.GetPriority() != 2 || task.GetTimeout() != 86400 {
		t.Fatalf("task = %v", task)
	}
	ok(t, s.ctl(t, "templates", "delete", "train-pytorch"))
	fails(t, s.ctl(t, "templates", "get", "train-pytorch"), "30004")
}

// The group file shown in docs/ctl.md reads as it says.
func TestDocsGroupFileExample(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/ctl.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Group files")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/ctl.md has no group file example")
	}
	gs, err := ParseGroupFile("ctl.md", []byte(block))
	if err != nil || len(gs) != 2 {
		t.Fatalf("%d groups, %v", len(gs), err)
	}
	dag, repeat := gs[0].Request, gs[1].Request
	tasks := dag.GetTasks()
	if dag.GetMode() != "dag" || len(tasks) != 4 || tasks[2].GetTemplateId() != "process-shard" ||
		tasks[2].GetVariables()["shard"].GetNumberValue() != 2 || !slices.Equal(tasks[3].GetDependsOn(), []string{"process1", "process2"}) {
		t.Fatalf("dag = %v", dag)
	}
	if dag.GetWebhook().GetUrl() != "https://example.com/hooks/nightly" || tasks[3].GetWebhook().GetUrl() != "https://example.com/hooks/merge" {
		t.Fatalf("webhooks = %v, %v", dag.GetWebhook(), tasks[3].GetWebhook())
	}
	if repeat.GetRepeat().GetCount() != 100 || repeat.GetRepeat().GetTemplate().GetCommand() != "bash" {
		t.Fatalf("repeat = %v", repeat)
	}
}
