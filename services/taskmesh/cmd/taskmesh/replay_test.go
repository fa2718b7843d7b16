package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// call calls the stack's REST API and decodes the JSON answer.
func call(t *testing.T, s *stack.Stack, method, path, key string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, s.HTTPURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A mixed workload — tasks that complete, fail (for good or retried), are
// cancelled, carry a webhook or a NUL in their name; admin changes to
// tenants, API keys and agents — runs on the whole
// stack; then kcat, an independent client, reads every event the
// scheduler recorded, and `taskmesh replay` finds every projection (task
// views, admission workloads, audit log, usage, webhook deliveries) equal
// to its rebuild. A tampered usage row is reported.
func TestReplayFindsNoDifferenceAfterAMixedWorkload(t *testing.T) {
	dir, err := os.MkdirTemp("", "tmreplay") // short: shims put sockets under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var notified atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { notified.Add(1) }))
	defer rcv.Close()
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DatabaseURL: pgtest.New(t).URL,
		Agent: true, AgentSlots: 4, Timing: scheduler.Timing{SweepInterval: 100 * time.Millisecond},
		Consumers: consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := s.DemoAPIKey
	if code, body := call(t, s, "PUT", "/api/v1/webhook-endpoint", key, map[string]any{"url": rcv.URL + "/hooks"}); code != 200 || body["secret"] == "" {
		t.Fatalf("set endpoint = %d %v", code, body)
	}
	tasks := []map[string]any{
		{"name": "ok-1", "command": "echo", "args": []string{"one"}},
		{"name": "ok-2", "command": "echo", "args": []string{"two"}, "webhook": map[string]any{"url": rcv.URL + "/own"}},
		{"name": "fails", "command": "false", "max_retries": 0},
		{"name": "retried", "command": "false", "max_retries": 1, "retry_delay": 0},
		{"name": "long", "command": "sleep", "args": []string{"30"}},
		{"name": "x\u0000", "command": "echo"},
		{"name": "gpu", "command": "echo", "resources": map[string]any{"nvidia.com/gpu": "1"}},
	}
	var ids []string
	for _, spec := range tasks {
		code, body := call(t, s, "POST", "/api/v1/tasks", key, spec)
		if code != 200 {
			t.Logf("%q refused: %d %v", spec["name"], code, body)
			continue
		}
		ids = append(ids, body["id"].(string))
	}
	long := ids[4]
	waitUntil(t, "the long task to run", func() bool {
		_, b := call(t, s, "GET", "/api/v1/tasks/"+long, key, nil)
		return b["status"] == "running"
	})
	if code, body := call(t, s, "POST", "/api/v1/tasks/"+long+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel = %d %v", code, body)
	}
	for _, id := range ids {
		waitUntil(t, "task "+id+" to end", func() bool {
			_, b := call(t, s, "GET", "/api/v1/tasks/"+id, key, nil)
			return b["status"] == "completed" || b["status"] == "failed" || b["status"] == "cancelled"
		})
	}
	// Task groups and templates: a serial group, a repeat whose breaker
	// opens (an alert to the tenant's endpoint), a template.
	var groups []string
	for _, g := range []map[string]any{
		{"name": "serial", "mode": "serial", "start": true, "tasks": []map[string]any{{"name": "a", "command": "echo"}, {"name": "b", "command": "echo"}}},
		{"start": true, "repeat": map[string]any{"count": 3, "circuit_breaker_threshold": 1, "template": map[string]any{"name": "flaky", "command": "false"}}},
	} {
		code, body := call(t, s, "POST", "/api/v1/task-groups", key, g)
		if code != 200 {
			t.Fatalf("create group = %d %v", code, body)
		}
		groups = append(groups, body["id"].(string))
	}
	if code, body := call(t, s, "POST", "/api/v1/templates", key, map[string]any{"id": "echo", "name": "Echo", "command": "echo"}); code != 200 {
		t.Fatalf("create template = %d %v", code, body)
	}
	waitUntil(t, "the serial group to complete", func() bool {
		_, b := call(t, s, "GET", "/api/v1/task-groups/"+groups[0], key, nil)
		return b["status"] == "completed"
	})
	waitUntil(t, "the repeat's breaker to open", func() bool {
		_, b := call(t, s, "GET", "/api/v1/task-groups/"+groups[1], key, nil)
		r, _ := b["repeat"].(map[string]any)
		return r["circuit_open"] == true
	})
	waitUntil(t, "the breaker's alert", func() bool {
		_, b := call(t, s, "GET", "/api/v1/webhook-deliveries?state=delivered", key, nil)
		ds, _ := b["deliveries"].([]any)
		for _, d := range ds {
			if d.(map[string]any)["status"] == "circuit_open" {
				return true
			}
		}
		return false
	})
	waitUntil(t, "the groups and the template in the audit log", func() bool {
		_, b := call(t, s, "GET", "/api/v1/audit-logs?action=template.created", key, nil)
		l, _ := b["audit_logs"].([]any)
		_, g := call(t, s, "GET", "/api/v1/audit-logs?resource=task_group&action=circuit_opened", key, nil)
		gl, _ := g["audit_logs"].([]any)
		return len(l) == 1 && len(gl) == 1
	})
	waitUntil(t, "the notifications", func() bool { return int(notified.Load()) >= len(ids) })
	// Admin changes: a tenant, its key (revoked), an agent (drained,
	// revoked); each is an entry of the admin topic's projection.
	raw, err := os.ReadFile(s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	for _, c := range []struct {
		method, path string
		body         map[string]any
	}{
		{"POST", "/api/v1/admin/tenants", map[string]any{"tenant_id": "acme", "name": "Acme", "tier": "standard"}},
		{"PATCH", "/api/v1/admin/tenants/acme", map[string]any{"tier": "premium"}},
		{"POST", "/api/v1/admin/agents", map[string]any{"agent_id": "gpu-9", "tenant_id": "acme"}},
		{"POST", "/api/v1/admin/agents/gpu-9/drain", map[string]any{}},
		{"POST", "/api/v1/admin/agents/gpu-9/revoke", map[string]any{"reason": "retired"}},
	} {
		if code, body := call(t, s, c.method, c.path, op, c.body); code != 200 {
			t.Fatalf("%s %s = %d %v", c.method, c.path, code, body)
		}
	}
	code, body := call(t, s, "POST", "/api/v1/admin/tenants/acme/api-keys", op, map[string]any{"name": "ci"})
	if code != 200 {
		t.Fatalf("create key = %d %v", code, body)
	}
	keyID := body["api_key"].(map[string]any)["id"].(string)
	if code, body := call(t, s, "POST", "/api/v1/admin/tenants/acme/api-keys/"+keyID+"/revoke", op, map[string]any{}); code != 200 {
		t.Fatalf("revoke key = %d %v", code, body)
	}
	gw, err := pg.Open(ctx, pg.Config{URL: s.Postgres, Schema: gateway.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	var adminEvents int
	if err := gw.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&adminEvents); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every admin change in the audit log", func() bool {
		n := 0
		for _, r := range []string{"tenant_account", "api_key", "admin_key", "agent"} {
			_, b := call(t, s, "GET", "/api/v1/audit-logs?page_size=1000&resource="+r, op, nil)
			l, _ := b["audit_logs"].([]any)
			n += len(l)
		}
		return n == adminEvents
	})
	waitUntil(t, "the quota topic in the audit log", func() bool {
		_, b := call(t, s, "GET", "/api/v1/audit-logs?resource=tenant", key, nil)
		l, _ := b["audit_logs"].([]any)
		return len(l) > 0
	})

	pool, err := pg.Open(ctx, pg.Config{URL: s.Postgres, Schema: scheduler.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	var read []kafkatest.KcatRecord
	waitUntil(t, "kcat to read every event", func() bool {
		read = kafkatest.Remote(s.Kafka).ConsumeAll(t, scheduler.Topic)
		groups := kafkatest.Remote(s.Kafka).ConsumeAll(t, scheduler.OrchestrationTopic)
		return len(read)+len(groups) == events
	})
	// The consumers that notify nobody (audit, usage) catch up on their own
	// time: wait until each has gone past the last record of every
	// partition (offsets count transaction markers too, so not the events).
	last := map[int32]int64{}
	for _, r := range read {
		last[r.Partition] = max(last[r.Partition], r.Offset+1)
	}
	for _, name := range []string{"audit_tasks", "usage", "webhooks"} {
		waitUntil(t, name+" to apply every event", func() bool {
			rows, err := pool.Query(ctx, `SELECT partition, next_offset FROM `+consumers.Schema+`.projection_offsets
				WHERE projection = $1 AND topic = $2`, name, scheduler.Topic)
			if err != nil {
				return false
			}
			behind := len(last)
			for rows.Next() {
				var (
					p    int32
					next int64
				)
				if rows.Scan(&p, &next) == nil && next >= last[p] && last[p] > 0 {
					behind--
				}
			}
			rows.Close()
			return behind == 0
		})
	}

	var out bytes.Buffer
	k := kafka.Config{Brokers: s.Kafka}
	if err := replay(ctx, &out, s.Postgres, k, false, false); err != nil {
		t.Fatalf("replay: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`admission_workloads → workload_task_versions: .* live 1 rows, replay 1 rows`).MatchString(out.String()) {
		t.Errorf("the GPU task left no workload:\n%s", out.String())
	}
	t.Log(out.String())
	for _, name := range []string{"task_read_models", "admission_workloads", "audit_tasks", "audit_orchestration", "audit_pipeline", "audit_quota",
		"audit_admin", "usage",
		"webhooks", "webhook_alerts", "all projections equal their replay"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("the replay does not mention %s:\n%s", name, out.String())
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE consumers.usage_records SET quantity = quantity + 1 WHERE ctid = (SELECT min(ctid) FROM consumers.usage_records)`); err != nil {
		t.Fatal(err)
	}
	// A task row that no event explains: replay names the task.
	var tampered string
	if err := pool.QueryRow(ctx, `UPDATE scheduler.tasks SET doc = jsonb_set(doc::jsonb, '{progress}', '7')::json
		WHERE id = (SELECT min(id) FROM scheduler.tasks) RETURNING id`).Scan(&tampered); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := replay(ctx, &out, s.Postgres, k, false, false); err == nil || !strings.Contains(out.String(), "usage → usage_records") ||
		!strings.Contains(out.String(), "1 only live, 1 only replay") {
		t.Errorf("a tampered usage row: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), ", 1 differ\n  differing: "+tampered+"\n") {
		t.Errorf("a tampered task row: replay does not name task %s:\n%s", tampered, out.String())
	}
}
