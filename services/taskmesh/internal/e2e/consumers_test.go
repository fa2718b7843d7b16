package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ctl"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// hook is one notification a receiver got.
type hook struct {
	path   string
	header http.Header
	body   string
}

// signedBy checks a notification against a whsec_ secret as the Standard
// Webhooks specification says a receiver does (written from its text):
// HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>" with the
// base64-decoded secret, base64, and one of the space-separated "v1,…"
// signatures must match.
func signedBy(h hook, secret string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.header.Get("webhook-id") + "." + h.header.Get("webhook-timestamp") + "." + h.body))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

// The consumers service on the whole stack, through the gateway: the
// audit log with the caller's address, usage as JSON and CSV, signed
// notifications and their deliveries, the dead-letter API for operators,
// and the ctl commands over all of them.
func TestConsumersThroughTheGateway(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []hook
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, hook{r.URL.Path, r.Header.Clone(), string(b)})
		mu.Unlock()
	}))
	defer rcv.Close()
	w := newWorldWith(t, stack.Options{Timing: scheduler.Timing{AgentLostAfter: 3 * time.Second, SweepInterval: 200 * time.Millisecond},
		Consumers: consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
	key := w.s.DemoAPIKey
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(raw))
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)

	code, set, _ := w.call("PUT", "/api/v1/webhook-endpoint", key, map[string]any{"url": rcv.URL + "/default"})
	secret, _ := set["secret"].(string)
	if code != 200 || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("set endpoint = %d %v", code, set)
	}
	// A PUT without a body would read as {"url": ""}, which removes the
	// endpoint: it is refused, and the endpoint stays.
	if code, body, _ := w.call("PUT", "/api/v1/webhook-endpoint", key, nil); code != 400 || body["code"] != float64(30005) {
		t.Errorf("a body-less PUT = %d %v, want 400 with 30005", code, body)
	}
	if code, body, _ := w.call("GET", "/api/v1/webhook-endpoint", key, nil); code != 200 || !strings.Contains(fmt.Sprint(body), rcv.URL+"/default") {
		t.Errorf("the endpoint after a refused PUT = %d %v", code, body)
	}
	// The completed task runs for two seconds, so it is metered for more
	// than nothing however late the server records its start: a task that
	// ends by the agent's clock before that is metered from the start to
	// the start (docs/api/tasks.md#agent-protocol), and the usage checks
	// below need an amount.
	ok := w.submit(key, map[string]any{"name": "ok", "type": "shell", "command": "sleep", "args": []string{"2"},
		"webhook": map[string]any{"url": rcv.URL + "/own"}})
	bad := w.submit(key, map[string]any{"name": "bad", "type": "shell", "command": "false", "max_retries": 0})
	w.waitStatus(key, ok, 30*time.Second, "completed")
	w.waitStatus(key, bad, 30*time.Second, "failed")
	waitFor(t, 30*time.Second, "two notifications", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	mu.Lock()
	for _, h := range got {
		want := map[string]string{"/own": `{"task_id":"` + ok + `","status":"completed"}`, "/default": `{"task_id":"` + bad + `","status":"failed"}`}[h.path]
		if h.body != want || !signedBy(h, secret) {
			t.Errorf("%s: body %s (want %s), signed %v", h.path, h.body, want, signedBy(h, secret))
		}
	}
	mu.Unlock()

	// The audit log: the document's query, the caller's address.
	var created []any
	waitFor(t, 30*time.Second, "task.created in the audit log", func() bool {
		_, body, _ := w.call("GET", "/api/v1/audit-logs?resource=task&action=created&from=2024-01-01", key, nil)
		created, _ = body["audit_logs"].([]any)
		return len(created) == 2
	})
	first := created[0].(map[string]any)
	if first["ip"] != "127.0.0.1" || first["action"] != "task.created" || first["resource"] != "task" || first["user_id"] == "" {
		t.Errorf("audit entry = %v", first)
	}
	// What the agent did is attributed to it as agent:<id>, whichever call
	// it made (docs/api/audit.md), and found by that user_id.
	// The audit consumer writes entries as it reads the stream, so the
	// list is read until both tasks' ends are in it: a count alone passes
	// early, since the claims (task.assigned) are the agent's entries too.
	var byAgent []any
	actions := map[string]int{}
	agentDone := func() bool {
		return actions["task.started"] == 2 && actions["task.completed"] == 1 && actions["task.failed"] == 1
	}
	waitFor(t, 30*time.Second, "the agent's entries in the audit log", func() bool {
		_, body, _ := w.call("GET", "/api/v1/audit-logs?resource=task&user_id=agent:agent-1", key, nil)
		byAgent, _ = body["audit_logs"].([]any)
		clear(actions)
		for _, e := range byAgent {
			actions[fmt.Sprint(e.(map[string]any)["action"])]++
		}
		return agentDone()
	})
	for _, e := range byAgent {
		// Each names the machine the attempt ran on.
		if entry := e.(map[string]any); entry["user_id"] != "agent:agent-1" || entry["machine_id"] != "machine-agent-1" {
			t.Errorf("an agent's entry = %v", entry)
		}
	}
	if actions["task.assigned"] != 2 {
		t.Errorf("the agent's actions = %v, want two claims besides the starts and ends", actions)
	}
	// Templates and groups a client changes carry its address too.
	if code, body, _ := w.call("POST", "/api/v1/templates", key, map[string]any{"id": "audited", "name": "audited", "command": "echo"}); code != 200 {
		t.Fatalf("create template = %d %v", code, body)
	}
	if code, body, _ := w.call("DELETE", "/api/v1/templates/audited", key, nil); code != 200 {
		t.Fatalf("delete template = %d %v", code, body)
	}
	if code, body, _ := w.call("POST", "/api/v1/task-groups", key, map[string]any{"name": "audited", "start": false,
		"tasks": []any{map[string]any{"name": "a", "command": "echo"}}}); code != 200 {
		t.Fatalf("create group = %d %v", code, body)
	}
	for _, q := range []string{"resource=template&action=created", "resource=template&action=deleted", "resource=task_group&action=created"} {
		var entries []any
		waitFor(t, 30*time.Second, q+" in the audit log", func() bool {
			_, body, _ := w.call("GET", "/api/v1/audit-logs?"+q, key, nil)
			entries, _ = body["audit_logs"].([]any)
			return len(entries) == 1
		})
		if e := entries[0].(map[string]any); e["ip"] != "127.0.0.1" || e["user_id"] == "" {
			t.Errorf("%s: audit entry = %v", q, e)
		}
	}
	if code, body, _ := w.call("GET", "/api/v1/audit-logs?from=yesterday", key, nil); code != 400 || body["code"] != float64(30005) {
		t.Errorf("a bad date = %d %v", code, body)
	}
	if code, body, _ := w.call("GET", "/api/v1/audit-logs?resource=tenant", admin, nil); code != 200 || len(body["audit_logs"].([]any)) == 0 {
		t.Errorf("operator audit of tenants = %d %v", code, body)
	}

	// Usage: JSON, then CSV by format= and by Accept.
	waitFor(t, 30*time.Second, "usage", func() bool {
		_, body, _ := w.call("GET", "/api/v1/usage?group_by=tenant", key, nil)
		total, _ := body["total"].(map[string]any)
		return total != nil && total["items"] == "2" || total != nil && total["items"] == float64(2)
	})
	// The CSV's amounts are the JSON's, not rounded again. Usage may still
	// grow while the test runs: a CSV is compared with the JSON read just
	// before it, and read again when the JSON after it differs.
	totalAmount := func() float64 {
		_, body, _ := w.call("GET", "/api/v1/usage?group_by=day", key, nil)
		total, _ := body["total"].(map[string]any)
		amount, _ := total["amount"].(float64)
		return amount
	}
	csvAmount := func(what string, read func() string) {
		t.Helper()
		var got, want, out string
		for range 10 {
			before := totalAmount()
			out = read()
			if totalAmount() != before {
				continue
			}
			got, want = "", strconv.FormatFloat(before, 'f', -1, 64)
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Split(l, ","); f[0] == "total" && len(f) == 8 {
					got = f[6]
				}
			}
			if before != 0 && got == want {
				return
			}
			break
		}
		t.Errorf("%s: total amount %q, want %q as in the JSON:\n%s", what, got, want, out)
	}
	csvAmount("format=csv", func() string {
		req, _ := http.NewRequest("GET", w.s.HTTPURL+"/api/v1/usage?group_by=day&format=csv", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	})
	for _, accept := range []string{"format=csv", "accept"} {
		path := "/api/v1/usage?group_by=day"
		req, _ := http.NewRequest("GET", w.s.HTTPURL+path, nil)
		if accept == "format=csv" {
			req.URL.RawQuery += "&format=csv"
		} else {
			req.Header.Set("Accept", "text/csv")
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") ||
			!strings.HasPrefix(string(b), "key,gpu_seconds,cpu_seconds,video_seconds,stage_seconds,items,amount,currency\n") ||
			!strings.Contains(string(b), "\ntotal,") {
			t.Errorf("%s: %d %s\n%s", accept, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
	if code, body, _ := w.call("GET", "/api/v1/usage?group_by=hour", key, nil); code != 400 {
		t.Errorf("a bad grouping = %d %v", code, body)
	}

	// Deliveries, and the dead letters (operators only).
	_, dl, _ := w.call("GET", "/api/v1/webhook-deliveries?state=delivered", key, nil)
	if ds, _ := dl["deliveries"].([]any); len(ds) != 2 {
		t.Errorf("delivered = %v", dl)
	}
	if code, body, _ := w.call("GET", "/api/v1/admin/dead-letters", admin, nil); code != 200 || len(body["dead_letters"].([]any)) != 0 {
		t.Errorf("dead letters = %d %v", code, body)
	}
	if code, _, _ := w.call("GET", "/api/v1/admin/dead-letters", key, nil); code != 403 {
		t.Errorf("an API key listing dead letters = %d", code)
	}

	// A group's webhook: each member notifies it as a task, then the group
	// once as a group, signed alike.
	grp := w.createGroup(key, map[string]any{"mode": "parallel", "webhook": map[string]any{"url": rcv.URL + "/group"},
		"tasks": []map[string]any{{"name": "member", "type": "shell", "command": "echo", "args": []string{"m"}}}})
	waitFor(t, 30*time.Second, "the group's two notifications", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, h := range got {
			if h.path == "/group" {
				n++
			}
		}
		return n == 2
	})
	mu.Lock()
	var groupBodies []string
	for _, h := range got {
		if h.path == "/group" {
			groupBodies = append(groupBodies, h.body)
			if !signedBy(h, secret) {
				t.Errorf("/group %s: not signed by the tenant's secret", h.body)
			}
		}
	}
	mu.Unlock()
	if want := `{"task_group_id":"` + grp + `","status":"completed"}`; !slices.Contains(groupBodies, want) ||
		!strings.Contains(strings.Join(groupBodies, " "), `"status":"completed"}`) || len(groupBodies) != 2 {
		t.Errorf("the group's notifications = %v, want %s and its member's", groupBodies, want)
	}
	if g := w.group(key, grp); g["status"] != "completed" {
		t.Errorf("group = %v", g)
	}

	ctlRun := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--server", w.s.GRPCAddr, "--api-key", key, "--admin-key", admin)
		if code := ctl.Main(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("ctl %v: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	for args, want := range map[string]string{
		"audit --resource task --action created":      "127.0.0.1",
		"audit --operator --resource tenant":          "tenant.created",
		"usage --group-by tenant":                     "demo",
		"usage --csv":                                 "key,gpu_seconds",
		"webhooks deliveries --state delivered":       "completed",
		"webhooks endpoint get":                       rcv.URL + "/default",
		"deadletters list":                            "ID",
		"webhooks deliveries --operator --task " + ok: ok,
	} {
		if out := ctlRun(strings.Fields(args)...); !strings.Contains(out, want) {
			t.Errorf("ctl %s lacks %q:\n%s", args, want, out)
		}
	}
	csvAmount("ctl usage --csv", func() string { return ctlRun("usage", "--csv") })
}
