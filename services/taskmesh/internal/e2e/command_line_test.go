package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// A command given as one command line without args (docs/api/tasks.md,
// "A command line") runs as its words, with no shell: a single task, and
// a serial group and a DAG whose members are command lines. Shell syntax
// and shell builtins are refused with 30005 and create nothing.
func TestCommandLinesRunAsTheirWords(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 4)

	code, created, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "line", "command": `printf '%s|' hello "big world"`})
	args, _ := created["args"].([]any)
	if code != 200 || created["command"] != "printf" || len(args) != 3 || args[2] != "big world" {
		t.Fatalf("create: %d %v", code, created)
	}
	done := w.waitStatus(key, created["id"].(string), 20*time.Second, "completed")
	if done["stdout"] != "hello|big world|" {
		t.Fatalf("ran %q", done["stdout"])
	}

	code, refused, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "pipe", "command": "echo a | wc -l"})
	if code != 400 || refused["code"] != float64(30005) || !strings.Contains(fmt.Sprint(refused["message"]), "shell syntax") ||
		!strings.Contains(fmt.Sprint(refused["message"]), "command") {
		t.Fatalf("a pipe: %d %v", code, refused)
	}
	// A shell builtin would fail to start on every agent, after every
	// retry: it is refused at once, as a command line and as the program
	// of explicit args.
	for _, body := range []map[string]any{
		{"name": "builtin", "command": "exit 1"},
		{"name": "builtin", "command": "cd", "args": []string{"/tmp"}},
	} {
		code, refused, _ := w.call("POST", "/api/v1/tasks", key, body)
		if code != 400 || refused["code"] != float64(30005) || !strings.Contains(fmt.Sprint(refused["message"]), "shell builtin") ||
			!strings.Contains(fmt.Sprint(refused["message"]), "type script") {
			t.Fatalf("a shell builtin %v: %d %v", body, code, refused)
		}
	}
	_, list, _ := w.call("GET", "/api/v1/tasks", key, nil)
	for _, tk := range list["tasks"].([]any) {
		if n := tk.(map[string]any)["name"]; n == "pipe" || n == "builtin" {
			t.Fatalf("the refused task was created: %v", tk)
		}
	}

	serial := w.createGroup(key, map[string]any{"mode": "serial", "tasks": []any{
		map[string]any{"name": "下载数据", "command": "echo downloaded"},
		map[string]any{"name": "处理数据", "command": "echo processed --shard=1"},
	}})
	dag := w.createGroup(key, map[string]any{"mode": "dag", "tasks": []any{
		map[string]any{"id": "download", "name": "下载数据", "command": "echo download"},
		map[string]any{"id": "process1", "name": "处理分片1", "command": "echo process --shard=1", "depends_on": []string{"download"}},
		map[string]any{"id": "process2", "name": "处理分片2", "command": "echo process --shard=2", "depends_on": []string{"download"}},
		map[string]any{"id": "merge", "name": "合并结果", "command": "echo merge", "depends_on": []string{"process1", "process2"}},
	}})
	for id, want := range map[string][]string{
		serial: {"downloaded\n", "processed --shard=1\n"},
		dag:    {"download\n", "process --shard=1\n", "process --shard=2\n", "merge\n"},
	} {
		g := w.waitGroup(key, id, 60*time.Second, "the group to settle", func(g map[string]any) bool {
			s := g["status"]
			return s == "completed" || s == "failed" || s == "cancelled"
		})
		if g["status"] != "completed" {
			t.Fatalf("group %s: %v", id, g)
		}
		var got []string
		for _, m := range g["tasks"].([]any) {
			_, tk, _ := w.call("GET", "/api/v1/tasks/"+m.(map[string]any)["task_id"].(string), key, nil)
			got = append(got, fmt.Sprint(tk["stdout"]))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("group %s printed %q, want %q", id, got, want)
		}
	}
}
