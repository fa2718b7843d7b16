package ctl

import (
	"strings"
	"testing"
)

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
