package e2e

import (
	"strings"
	"testing"
	"time"
)

// grace_period_sec 0 is no grace, end to end: the task is stored with 0
// and its timeout kills it right after SIGTERM, not after the agent's
// default (docs/api/tasks.md#taskspec).
func TestZeroGraceTimeoutKillsAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	id := w.submit(key, map[string]any{"name": "no-grace", "type": "script", "timeout": 2, "grace_period_sec": 0,
		"max_retries": 0, "command": `trap "echo TERM" TERM; while :; do sleep 0.1; done`})
	if got := w.task(key, id)["grace_period_sec"]; got != float64(0) {
		t.Fatalf("grace_period_sec shown as %v, want 0", got)
	}
	w.waitStatus(key, id, 20*time.Second, "running")
	begin := time.Now()
	task := w.waitStatus(key, id, 25*time.Second, "failed")
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("the task ended %s after it started running: it waited for a grace", took)
	}
	if msg, _ := task["error"].(string); !strings.Contains(msg, "timeout after 2s") {
		t.Errorf("error %q, want the timeout", msg)
	}
}
