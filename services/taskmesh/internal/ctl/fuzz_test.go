package ctl

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// Fuzzing these targets usefully:
//
//	go test -run XXX -fuzz FuzzTaskFile -fuzzminimizetime 2000x ./internal/ctl/
//
// The package's test binary links every service its integration tests
// start, and the fuzzer instruments all of it: each call pays for a
// coverage map of about 380 KB, so even a target that does nothing runs
// only about 2,000 times a second here (in a binary holding only the
// parsers, about 9,000). The fuzzer also minimizes every input that
// finds new coverage, trying up to n*n/2 shorter inputs for one of n
// bytes; while it does, its progress line reads "0/sec". An input of a
// few kilobytes takes the whole -fuzzminimizetime (60s by default), after
// which the worker is restarted and the input kept unminimized, so larger
// inputs breed more of them and a long run spends most of its time
// minimizing. -fuzzminimizetime 2000x bounds each minimization to 2,000
// calls (about a second). A worker killed while minimizing (kill -QUIT
// for its stack) is reported as "fuzzing process hung or terminated
// unexpectedly while minimizing" and the input it held is written to
// testdata/fuzz: that is not a failure of the parser, and the file should
// be deleted.

// FuzzTaskFile feeds arbitrary task files (YAML or JSON, one form per
// document) to the parser: nothing panics, an error names the file, and
// every task it accepts has a name.
func FuzzTaskFile(f *testing.F) {
	for _, s := range []string{
		"task:\n  id: nightly\n  name: report\n  command: python\n  args: [report.py]\n  priority: 3\n",
		"local_queue:\n  machine_id: gpu-17\n  tasks:\n    - {name: a, command: echo, args: [a]}\n    - {name: b, command: echo, status: completed}\n",
		"{name: bare, command: \"true\"}\n---\n{name: two, command: x, targets: {machine_ids: [m1], ips: [10.0.0.1]}}\n",
		"task: {name: d, command: x, distribution: {mode: scatter, count: 2, labels: [gpu]}, env: {A: b}}\n",
		"group: {name: g}\n", "tasks: []\n", "task: {name: x, prioritee: 3}\n", "- a\n- b\n", "&a [*a]\n", "{\"task\": {\"name\": \"j\", \"command\": \"c\"}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tasks, _, err := ParseTaskFile("fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, task := range tasks {
			if task.Spec.GetName() == "" {
				t.Fatalf("accepted a task without a name: %+v", task)
			}
		}
	})
}

// FuzzGroupFile feeds arbitrary group files (group and repeat forms, one
// per YAML document) to the parser: nothing panics, an error names the
// file, and every group it accepts is one form or the other (a repeat has
// a template, not members; mode defaults to serial on the server) and
// encodes as a request (no invalid UTF-8 slipped through).
func FuzzGroupFile(f *testing.F) {
	for _, s := range []string{serialFile, parallelFile, dagFile, repeatFile,
		"group:\n  mode: parallel\n  start: false\n  tasks:\n    - template_id: train\n      variables: {model: bert, epochs: 3, amp: true}\n      priority: 2\n",
		"group:\n  mode: dag\n  taks: []\n", "repeat: {count: 3}\n", "group: {mode: serial, tasks: [{name: a, command: x}]}\n---\nrepeat: {count: 2, template: {name: r, command: y}}\n",
		"task: {name: x}\n", "group: []\n", "&a {group: *a}\n", "group: {mode: dag, tasks: [{id: a, depends_on: [a], command: x}]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		groups, err := ParseGroupFile("fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, g := range groups {
			r := g.Request
			if r.GetRepeat() != nil && (len(r.GetTasks()) > 0 || r.GetMode() != "") {
				t.Fatalf("accepted a group that is neither a group nor a repeat: %v", r)
			}
			if _, err := proto.Marshal(r); err != nil {
				t.Fatalf("accepted a group that does not encode: %v", err)
			}
		}
	})
}

// FuzzTemplateFile feeds arbitrary template files to the parser, as YAML
// and as strict JSON: nothing panics, an error names the file, and every
// template it accepts encodes as a request.
func FuzzTemplateFile(f *testing.F) {
	for _, s := range []string{
		"id: train\nname: train\ncommand: python\nargs: [train.py, \"--epochs={{epochs}}\"]\nvariables:\n  - {name: epochs, type: int, default: 10}\n",
		"id: t\nvariables:\n  - {name: x, defualt: a}\n", "comand: x\n", "env: {A: 1}\ntimeout: \"1h\"\n", "created_at: 2026-01-02T03:04:05Z\n",
		`{"id": "j", "variables": [{"name": "on", "type": "bool", "default": true}], "checkpoint": {"enabled": true}}`,
		`{"id": "j", "args": ["a",]}`, "- a\n", "id: a\n---\nid: b\n", "args: [a\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		name := "fuzz.yaml"
		if asJSON {
			name = "fuzz.json"
		}
		tpl, err := ParseTemplateFile(name, data)
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if _, err := proto.Marshal(tpl); err != nil {
			t.Fatalf("accepted a template that does not encode: %v", err)
		}
	})
}
