package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ctl"
)

// `taskmesh ctl queues` and `ctl tasks why` through the gateway's front
// door: the queues with their usage, and why a task that asks for more
// GPUs than its cohort has waits.
func TestCtlShowsQueuesAndWhyATaskWaits(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	id := w.submit(key, map[string]any{"name": "huge", "type": "shell", "command": "true",
		"resources": map[string]string{"nvidia.com/gpu": "16"}})
	try := func(args ...string) (stdout, stderr string, code int) {
		var out, errOut bytes.Buffer
		args = append(args, "--server", w.s.GRPCAddr, "--api-key", key)
		code = ctl.Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := try(args...)
		if code != 0 {
			t.Fatalf("ctl %v: exit %d: %s", args, code, errOut)
		}
		return out
	}

	// The admission layer learns of the task from the task topic; until
	// then it does not know it.
	var why string
	waitFor(t, 30*time.Second, "the task to be explained as waiting", func() bool {
		why, _, _ = try("tasks", "why", id)
		return strings.Contains(why, "state:       pending")
	})
	for _, want := range []string{"queue:       " + admission.LowPriorityQueue, "short:       nvidia.com/gpu", "requested 16"} {
		if !strings.Contains(why, want) {
			t.Errorf("why lacks %q:\n%s", want, why)
		}
	}
	// Over REST, the reason says what the fields say: position 1 (the
	// head of its queue) and 16 GPUs as 16 (docs/api/quota.md#explaining-a-wait).
	code, ex, _ := w.call("GET", "/api/v1/tasks/"+id+"/admission", key, nil)
	reason := fmt.Sprint(ex["reason"])
	if code != 200 || ex["position"] != float64(1) || !strings.HasPrefix(reason, "position 1 in "+admission.LowPriorityQueue+": ") ||
		!strings.Contains(reason, "requested 16,") {
		t.Errorf("admission = %d %v", code, ex)
	}
	queues := run("queues", "list")
	for _, want := range []string{"NAME", admission.HighPriorityQueue, admission.LowPriorityQueue, "nvidia.com/gpu (default-flavor)"} {
		if !strings.Contains(queues, want) {
			t.Errorf("queues list lacks %q:\n%s", want, queues)
		}
	}
	if got := run("queues", "get", admission.LowPriorityQueue, "-o", "json"); !strings.Contains(got, `"pending_workloads": 1`) &&
		!strings.Contains(got, `"pendingWorkloads": 1`) {
		t.Errorf("queues get -o json:\n%s", got)
	}
	if _, errOut, code := try("queues", "get", "no-such-queue"); code == 0 || !strings.Contains(errOut, "no-such-queue") {
		t.Errorf("unknown queue: exit %d, %q", code, errOut)
	}
}
