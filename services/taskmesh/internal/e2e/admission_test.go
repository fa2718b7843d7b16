package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// noGUQuotas is a GU quota check for tenants without any: every quota is
// GU_QUOTA_NOT_EXISTS, as the quota service answers.
type noGUQuotas struct{}

func (noGUQuotas) CheckGUQuota(_ context.Context, tenant, quota string) (admission.WorkGroup, error) {
	st, _ := status.New(codes.NotFound, fmt.Sprintf("GU_QUOTA_NOT_EXISTS: tenant %s has no GU quota %s", tenant, quota)).
		WithDetails(&errdetails.ErrorInfo{Domain: "taskmesh", Reason: "GU_QUOTA_NOT_EXISTS", Metadata: map[string]string{"code": "30010"}})
	return admission.WorkGroup{}, st.Err()
}

// On the embedded queues: a standard tenant's task borrows the cohort's 8
// GPUs and runs; a premium task needing the premium queue's 8 GPUs takes
// them back. The standard task's process gets SIGTERM, the task returns to
// pending, the premium task runs and completes, then the standard task is
// admitted again and completes.
func TestPremiumWorkReclaimsBorrowedGPUs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	std := w.s.DemoAPIKey // tier standard
	prem := w.tenantKeyOfTier("studio", gateway.TierPremium)
	gpus := map[string]string{"nvidia.com/gpu": "8"}

	termFile := filepath.Join(w.dir, "std.term")
	ranFile := filepath.Join(w.dir, "std.ran")
	readyFile := filepath.Join(w.dir, "std.ready")
	// The task reads running as soon as its process started, before the
	// shell has set its trap; a SIGTERM then would kill it without a
	// trace. The ready marker says the trap is set.
	script := fmt.Sprintf(`if [ -e %[2]s ]; then echo second run; exit 0; fi; touch %[2]s
trap 'echo TERM >> %[1]s; exit 143' TERM
touch %[3]s
sleep 300 & wait`, termFile, ranFile, readyFile)
	low := w.submit(std, map[string]any{"name": "std", "type": "script", "command": script, "resources": gpus, "grace_period_sec": 5})
	first := w.waitStatus(std, low, 30*time.Second, "running")
	if first["cluster_queue"] != admission.LowPriorityQueue {
		t.Fatalf("standard task queued in %v", first["cluster_queue"])
	}
	waitFor(t, 30*time.Second, "the standard task's TERM trap", func() bool {
		_, err := os.Stat(readyFile)
		return err == nil
	})

	high := w.submit(prem, map[string]any{"name": "prem", "type": "shell", "command": "echo", "args": []string{"premium done"},
		"resources": gpus})
	deadline := time.Now().Add(30 * time.Second)
	for b, _ := os.ReadFile(termFile); !strings.Contains(string(b), "TERM"); b, _ = os.ReadFile(termFile) {
		if time.Now().After(deadline) {
			_, ex, _ := w.call("GET", "/api/v1/tasks/"+high+"/admission", prem, nil)
			t.Fatalf("the standard task's process got no SIGTERM: standard task %v; premium task %v, admission %v",
				w.task(std, low), w.task(prem, high), ex)
		}
		time.Sleep(50 * time.Millisecond)
	}
	done := w.waitStatus(prem, high, 30*time.Second, "completed")
	if done["stdout"] != "premium done\n" || done["cluster_queue"] != admission.HighPriorityQueue {
		t.Fatalf("premium task = %v", done)
	}
	again := w.waitStatus(std, low, 40*time.Second, "completed")
	if again["stdout"] != "second run\n" || again["attempt_id"] == first["attempt_id"] {
		t.Fatalf("standard task = %v (first attempt %v)", again, first["attempt_id"])
	}
	// In between the standard task was back in its queue, which the API
	// may show for a moment only (it is admitted again as soon as the
	// premium task ends): the event log says it, in order.
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(context.Background(), `SELECT CASE aggregate_id WHEN $1 THEN 'std ' ELSE 'prem ' END || event_type
		FROM events WHERE aggregate_id IN ($1, $2) AND event_type IN ('TaskPreempted', 'TaskRequeued', 'TaskLeased', 'TaskSucceeded')
		ORDER BY id`, low, high)
	if err != nil {
		t.Fatal(err)
	}
	history, err := pgx.CollectRows(rows, pgx.RowTo[string])
	want := []string{"std TaskLeased", "std TaskPreempted", "std TaskRequeued", "prem TaskLeased", "prem TaskSucceeded",
		"std TaskLeased", "std TaskSucceeded"}
	if err != nil || !slices.Equal(history, want) {
		t.Fatalf("events = %v, %v; want %v", history, err, want)
	}
	// Where it stood is explained to its tenant only.
	code, ex, _ := w.call("GET", "/api/v1/tasks/"+low+"/admission", std, nil)
	if code != 200 || ex["cluster_queue"] != admission.LowPriorityQueue {
		t.Fatalf("explain = %d %v", code, ex)
	}
	if code, _, _ := w.call("GET", "/api/v1/tasks/"+low+"/admission", prem, nil); code != 404 {
		t.Fatalf("another tenant's explanation: %d", code)
	}
	code, qs, _ := w.call("GET", "/api/v1/cluster-queues", std, nil)
	// The two GPU queues, and the pipeline's three stage queues.
	if list, _ := qs["cluster_queues"].([]any); code != 200 || len(list) != 5 {
		t.Fatalf("cluster queues = %d %v", code, qs)
	}
}

// GPU work naming a GU quota the tenant does not have is refused with
// the task API's envelope, and nothing is stored.
func TestUnknownGUQuotaIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, stack.Options{GUQuotas: noGUQuotas{}})
	key := w.s.DemoAPIKey
	code, body, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "gu", "type": "shell", "command": "true",
		"quota": "render-farm", "resources": map[string]string{"nvidia.com/gpu": "1"}})
	if code != 400 || body["code"] != float64(30010) || body["data"] != nil || !strings.Contains(fmt.Sprint(body["message"]), "GU_QUOTA_NOT_EXISTS") {
		t.Fatalf("submit = %d %v", code, body)
	}
	if _, ok := body["data"]; !ok {
		t.Fatalf("envelope without data: %v", body)
	}
	if n := countEvents(t, w); n != 0 {
		t.Fatalf("%d events stored after a refused submission", n)
	}
	// Through the API too: once a task submitted after the refusal is
	// listed, the list holds that task alone.
	marker := w.submit(key, map[string]any{"name": "after", "type": "shell", "command": "true"})
	if tasks := w.waitListed(key, marker); len(tasks) != 1 {
		t.Fatalf("tasks listed: %v", tasks)
	}
}

// Work its queue could never admit is refused when it is submitted, as an
// unknown queue is (docs/api/quota.md#which-work-waits-and-where), and
// nothing is stored: a LocalQueue whose ClusterQueue was deleted, and a
// resource the queue the task is routed to has no quota for.
func TestWorkItsQueueCouldNeverAdmitIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op, key := strings.TrimSpace(string(raw)), w.s.DemoAPIKey
	if code, body, _ := w.call("PUT", "/api/v1/cluster-queues/orphan-cq", op, `{"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],
		"flavors":[{"name":"default-flavor","resources":[{"name":"nvidia.com/gpu","nominalQuota":1}]}]}]}`); code != 200 {
		t.Fatalf("put cluster queue = %d %v", code, body)
	}
	if code, body, _ := w.call("PUT", "/api/v1/local-queues/l-orphan-cq", op, map[string]any{"cluster_queue": "orphan-cq"}); code != 200 {
		t.Fatalf("put local queue = %d %v", code, body)
	}
	if code, body, _ := w.call("DELETE", "/api/v1/cluster-queues/orphan-cq", op, nil); code != 200 {
		t.Fatalf("delete cluster queue = %d %v", code, body)
	}
	for _, c := range []struct {
		name string
		task map[string]any
		says []string
	}{
		{"a queue whose cluster queue was deleted", map[string]any{"name": "orphan", "type": "shell", "command": "true",
			"queue": "l-orphan-cq", "resources": map[string]string{"nvidia.com/gpu": "1"}},
			[]string{`queue "l-orphan-cq": cluster queue orphan-cq does not exist`}},
		{"a resource its queue has no quota for", map[string]any{"name": "amd", "type": "shell", "command": "true",
			"resources": map[string]string{"amd.com/gpu": "1"}},
			[]string{"resources[amd.com/gpu]", `default queue "tenant-low-priority-queue"`, "has no quota for amd.com/gpu"}},
		{"beside a GPU, in a named queue", map[string]any{"name": "cpu", "type": "shell", "command": "true",
			"queue": "standard", "resources": map[string]string{"nvidia.com/gpu": "1", "cpu": "2"}},
			[]string{"resources[cpu]", `queue "standard"`, "has no quota for cpu"}},
	} {
		code, body, _ := w.call("POST", "/api/v1/tasks", key, c.task)
		msg := fmt.Sprint(body["message"])
		if data, ok := body["data"]; code != 400 || body["code"] != float64(30005) || !ok || data != nil {
			t.Fatalf("%s: submit = %d %v, want 400 with code 30005 and data null", c.name, code, body)
		}
		for _, want := range c.says {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: message %q does not say %q", c.name, msg, want)
			}
		}
	}
	if n := countEvents(t, w); n != 0 {
		t.Fatalf("%d events stored after refused submissions", n)
	}
	// Through the API too: once a task submitted after the refusals is
	// listed, the list holds that task alone.
	marker := w.submit(key, map[string]any{"name": "after", "type": "shell", "command": "true"})
	if tasks := w.waitListed(key, marker); len(tasks) != 1 {
		t.Fatalf("tasks listed: %v", tasks)
	}
}
