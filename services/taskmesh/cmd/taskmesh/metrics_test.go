package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one parsed /metrics answer.
type scrape struct {
	families map[string]*dto.MetricFamily
	text     string
}

func scrapeMetrics(t *testing.T, base string) scrape {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	return scrape{families: fams, text: string(b)}
}

// has reports whether a metric of that name is exported: a family, or a
// histogram's _bucket, _sum or _count series.
func (s scrape) has(name string) bool {
	if _, ok := s.families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := s.families[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
	}
	return false
}

// sum adds the values of name's series whose labels include match; ok is
// false when no series matches. Histograms add their sample counts.
func (s scrape) sum(name string, match map[string]string) (total float64, ok bool) {
	f := s.families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total, ok
}

// series counts the exported samples (lines), and the Taskmesh ones.
func (s scrape) series() (all, taskmesh int) {
	sc := bufio.NewScanner(strings.NewReader(s.text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		all++
		if strings.HasPrefix(line, "taskmesh_") {
			taskmesh++
		}
	}
	return all, taskmesh
}

// labelValues are every label value of every series.
func (s scrape) labelValues() map[string]bool {
	out := map[string]bool{}
	for _, f := range s.families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				out[l.GetValue()] = true
			}
		}
	}
	return out
}

// callREST is one REST call; it returns the status and the decoded body.
func callREST(t *testing.T, method, url, key string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// tenantKey creates a tenant (rpm: its requests per minute, 0 = the
// tier's) and returns a key of it.
func tenantKey(t *testing.T, base, adminKey, tenant string, rpm int) string {
	t.Helper()
	if code, body := callREST(t, "POST", base+"/api/v1/admin/tenants", adminKey,
		map[string]any{"tenant_id": tenant, "name": tenant, "tier": "standard", "rpm_limit": rpm}); code != 200 {
		t.Fatalf("create tenant %s: %d %v", tenant, code, body)
	}
	code, body := callREST(t, "POST", base+"/api/v1/admin/tenants/"+tenant+"/api-keys", adminKey, map[string]any{"name": "metrics test"})
	secret, _ := body["secret"].(string)
	if code != 200 || secret == "" {
		t.Fatalf("create key of %s: %d %v", tenant, code, body)
	}
	return secret
}

func waitRunning(t *testing.T, base, key, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, task := callREST(t, "GET", base+"/api/v1/tasks/"+id, key, nil); task["status"] == "running" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s never ran", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitScrape(t *testing.T, base string, within time.Duration, what string, ok func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := scrapeMetrics(t, base)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readKey(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A running stack (`taskmesh dev`) after a small workload exports every
// metric docs/operations.md lists, with values that match the workload;
// the alert rules and the dashboard name only metrics it exports; and
// 1,000 tasks of 20 tenants add no series per task or tenant.
func TestMetricsOfARunningStack(t *testing.T) {
	dir, err := os.MkdirTemp("", "tmmetrics")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user keeps its cluster under dir
		t.Fatal(err)
	}
	ports := [4]int{freePort(t), freePort(t), freePort(t), freePort(t)}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	dev := startDev(t, dir, ports, "--agent-slots", "4")
	demo, admin := readKey(t, dir, "demo-api-key"), readKey(t, dir, "admin-key")

	// The small workload: three process tasks, one that fails twice (one
	// retry), one GPU task admitted through a ClusterQueue, a live stream,
	// and a tenant over its rate limit.
	var ids []string
	submit := func(key string, spec map[string]any) string {
		code, body := callREST(t, "POST", base+"/api/v1/tasks", key, spec)
		id, _ := body["id"].(string)
		if code != 200 || id == "" {
			t.Fatalf("create task: %d %v", code, body)
		}
		ids = append(ids, id)
		return id
	}
	for i := range 3 {
		submit(demo, map[string]any{"name": fmt.Sprint("echo ", i), "command": "echo", "args": []string{"hi"}})
	}
	failing := submit(demo, map[string]any{"name": "fails", "command": "false", "max_retries": 1, "retry_delay": 0})
	submit(demo, map[string]any{"name": "gpu", "command": "echo", "args": []string{"gpu"},
		"resources": map[string]string{"nvidia.com/gpu": "1"}})
	const completedSmall = 4
	// A task that runs until cancelled, followed live.
	sleeper := submit(demo, map[string]any{"name": "sleeps", "command": "sleep", "args": []string{"300"}})
	waitRunning(t, base, demo, sleeper)
	stream, err := http.NewRequest("GET", base+"/api/v1/tasks/"+sleeper+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	stream.Header.Set("Authorization", "Bearer "+demo)
	live, err := http.DefaultClient.Do(stream)
	if err != nil || live.StatusCode != 200 {
		t.Fatalf("live stream: %v %v", live, err)
	}
	throttled := tenantKey(t, base, admin, "throttled", 1)
	callREST(t, "GET", base+"/api/v1/tasks", throttled, nil)
	if code, _ := callREST(t, "GET", base+"/api/v1/tasks", throttled, nil); code != http.StatusTooManyRequests {
		t.Fatalf("a second request at 1 RPM = %d, want 429", code)
	}
	for _, id := range ids {
		if id != failing && id != sleeper {
			waitCompleted(t, base, demo, id)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, task := callREST(t, "GET", base+"/api/v1/tasks/"+failing, demo, nil)
		if task["status"] == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing task is %v", task["status"])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Caught up: every relay's backlog is back to 0 and the read model
	// has applied every completion. The agent sends StartTask alongside
	// the spawn, so the sleeping task can be running on the server before
	// its shim has started: wait for its slot too.
	small := waitScrape(t, base, 30*time.Second, "relays caught up and the sleeper spawned", func(s scrape) bool {
		n, ok := s.sum("taskmesh_tasks_completed_total", nil)
		used, _ := s.sum("taskmesh_agent_slots", map[string]string{"state": "used"})
		return ok && n == completedSmall && caughtUp(s) && used == 1
	})
	// The task gauge counts at most every 10 s: wait for the count that
	// includes the sleeping task.
	waitScrape(t, base, 30*time.Second, "the running task counted", func(s scrape) bool {
		n, _ := s.sum("taskmesh_tasks", map[string]string{"status": "running"})
		return n == 1
	})
	live.Body.Close()
	if code, body := callREST(t, "POST", base+"/api/v1/tasks/"+sleeper+"/cancel", demo, map[string]any{}); code != 200 {
		t.Fatalf("cancel: %d %v", code, body)
	}

	t.Run("every named metric with plausible values", func(t *testing.T) {
		checkNamedMetrics(t, small, completedSmall)
	})
	t.Run("alert rules name exported metrics", func(t *testing.T) { checkAlertRules(t, small) })
	t.Run("dashboard queries name exported metrics", func(t *testing.T) { checkDashboard(t, small) })
	t.Run("cardinality stays bounded over 1,000 tasks of 20 tenants", func(t *testing.T) {
		checkCardinality(t, base, admin, small, completedSmall)
	})
	dev.stop(t)
}

// caughtUp: every relay is caught up.
func caughtUp(s scrape) bool {
	f := s.families["taskmesh_outbox_backlog_age_seconds"]
	if f == nil || len(f.GetMetric()) == 0 {
		return false
	}
	for _, m := range f.GetMetric() {
		if m.GetGauge().GetValue() != 0 {
			return false
		}
	}
	return true
}

// namedMetric is a metric the stack must export: its labels to match and
// a check of the matching series' sum.
type namedMetric struct {
	name   string
	labels map[string]string
	check  func(v float64) bool
	want   string
}

func atLeast(n float64) (func(float64) bool, string) {
	return func(v float64) bool { return v >= n }, fmt.Sprintf(">= %v", n)
}

func exactly(n float64) (func(float64) bool, string) {
	return func(v float64) bool { return v == n }, fmt.Sprintf("== %v", n)
}

func metricWant(name string, labels map[string]string, check func(float64) bool, want string) namedMetric {
	return namedMetric{name: name, labels: labels, check: check, want: want}
}

func checkNamedMetrics(t *testing.T, s scrape, completed float64) {
	l := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	w := func(name string, labels map[string]string, check func(float64) bool, want string) namedMetric {
		return metricWant(name, labels, check, want)
	}
	var metrics []namedMetric
	add := func(name string, labels map[string]string, f func(float64) (func(float64) bool, string), n float64) {
		c, d := f(n)
		metrics = append(metrics, w(name, labels, c, d))
	}
	// Requests by route template and code, and their latency.
	add("taskmesh_http_requests_total", l("route", "/api/v1/tasks", "method", "POST", "code", "200"), exactly, 6)
	// Refused before routing: the API's prefix names it.
	add("taskmesh_http_requests_total", l("route", "/api/*", "method", "GET", "code", "429"), exactly, 1)
	add("taskmesh_http_request_duration_seconds", l("route", "/api/v1/tasks/{id}", "method", "GET"), atLeast, 5)
	// gRPC calls through the front door: the local agent's claims and
	// heartbeats.
	add("taskmesh_grpc_requests_total", l("method", "/taskmesh.task.v1.LeaseService/ClaimTasks", "code", "OK"), atLeast, 1)
	add("taskmesh_grpc_request_duration_seconds", l("method", "/taskmesh.task.v1.LeaseService/ClaimTasks"), atLeast, 1)
	// Rate-limit rejections by tenant.
	add("taskmesh_ratelimit_rejections_total", l("tenant", "throttled", "limit", "tenant_rpm"), exactly, 1)
	// Tasks by status and queue; completions; submit → start latency;
	// lease expirations, retries, preemptions.
	add("taskmesh_tasks", l("status", "pending"), exactly, 0)
	add("taskmesh_tasks", l("status", "running"), atLeast, 0)
	add("taskmesh_tasks_completed_total", nil, exactly, completed)
	add("taskmesh_tasks_completed_total", l("cluster_queue", "tenant-low-priority-queue"), exactly, 1)
	add("taskmesh_tasks_failed_total", nil, exactly, 2)
	add("taskmesh_task_retries_total", nil, exactly, 1)
	add("taskmesh_task_start_latency_seconds", nil, exactly, completed+3)
	add("taskmesh_task_lease_expirations_total", nil, exactly, 0)
	add("taskmesh_task_preemptions_total", nil, exactly, 0)
	// Admission per ClusterQueue and resource, and its decisions.
	add("taskmesh_admission_pending_workloads", l("cluster_queue", "tenant-low-priority-queue"), exactly, 0)
	add("taskmesh_admission_admitted_workloads", l("cluster_queue", "tenant-low-priority-queue"), exactly, 0)
	add("taskmesh_admission_admitted_usage", l("cluster_queue", "tenant-low-priority-queue", "resource", "nvidia.com/gpu"), exactly, 0)
	add("taskmesh_admission_borrowed_usage", l("cluster_queue", "tenant-low-priority-queue", "resource", "nvidia.com/gpu"), exactly, 0)
	add("taskmesh_admission_nominal_quota", l("cluster_queue", "tenant-low-priority-queue", "resource", "nvidia.com/gpu"), atLeast, 1)
	add("taskmesh_admission_decisions_total", l("cluster_queue", "tenant-low-priority-queue", "decision", "admit"), exactly, 1)
	// The outbox relays: caught up, no publish errors, no foreign records.
	add("taskmesh_outbox_backlog_age_seconds", l("relay", "scheduler"), exactly, 0)
	add("taskmesh_outbox_published_total", l("relay", "scheduler"), atLeast, 1)
	add("taskmesh_outbox_publish_errors_total", nil, exactly, 0)
	add("taskmesh_outbox_foreign_records_total", l("relay", "scheduler"), exactly, 0)
	add("taskmesh_outbox_relay_active", l("relay", "scheduler"), exactly, 1)
	// Projections: lag, applied records, no errors, no dead letters.
	add("taskmesh_projection_lag_seconds", l("projection", "task_read_models"), atLeast, 0)
	add("taskmesh_projection_applied_total", l("projection", "task_read_models"), atLeast, 1)
	add("taskmesh_projection_errors_total", nil, exactly, 0)
	add("taskmesh_projection_dead_letters_total", l("projection", "task_read_models"), exactly, 0)
	// Live streams: the one stream was open at the scrape.
	add("taskmesh_live_streams", nil, exactly, 1)
	// The agent: heartbeats, slots (the sleeping task's in use), spawn
	// latency of the seven processes (the failing task ran twice).
	add("taskmesh_agent_heartbeats_total", l("result", "ok"), atLeast, 1)
	add("taskmesh_agent_heartbeat_duration_seconds", l("result", "ok"), atLeast, 1)
	add("taskmesh_agent_fence_lapses_total", nil, exactly, 0)
	add("taskmesh_agent_slots", nil, exactly, 4)
	add("taskmesh_agent_slots", l("state", "used"), exactly, 1)
	add("taskmesh_agent_spawn_duration_seconds", nil, exactly, completed+3)
	// One shim host served them all.
	add("taskmesh_agent_shim_host_starts_total", nil, exactly, 1)
	// Pipeline uploads expired unused: none yet, exported from the start.
	add("taskmesh_pipeline_uploads_expired_total", l("kind", "model"), exactly, 0)
	// Postgres pools.
	add("taskmesh_pg_pool_connections", l("pool", "scheduler", "state", "idle"), atLeast, 1)
	add("taskmesh_pg_pool_max_connections", l("pool", "scheduler"), atLeast, 1)
	add("taskmesh_pg_pool_acquires_total", l("pool", "scheduler"), atLeast, 1)
	add("taskmesh_pg_pool_acquire_wait_seconds_total", l("pool", "scheduler"), atLeast, 0)
	for _, m := range metrics {
		v, ok := s.sum(m.name, m.labels)
		if !ok {
			t.Errorf("%s%v is not exported", m.name, m.labels)
			continue
		}
		if !m.check(v) {
			t.Errorf("%s%v = %v, want %s", m.name, m.labels, v, m.want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", taskmeshLines(s.text))
	}
}

// taskmeshLines are the scrape's Taskmesh series, for failure messages.
func taskmeshLines(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "taskmesh_") && !strings.Contains(line, "_bucket{") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// checkCardinality runs 1,000 no-op tasks, 50 for each of 20 tenants,
// and checks that the series they add are few and name no task.
func checkCardinality(t *testing.T, base, admin string, before scrape, completedBefore float64) {
	const tenants, perTenant = 20, 50
	keys := make([]string, tenants)
	for i := range keys {
		keys[i] = tenantKey(t, base, admin, fmt.Sprintf("load-%02d", i), 0)
	}
	ids := make(chan string, tenants*perTenant)
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			for j := range perTenant {
				code, body := callREST(t, "POST", base+"/api/v1/tasks", key, map[string]any{"name": fmt.Sprintf("load %d/%d", i, j), "type": "noop"})
				id, _ := body["id"].(string)
				if code != 200 || id == "" {
					t.Errorf("create: %d %v", code, body)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	if t.Failed() {
		return
	}
	want := completedBefore + tenants*perTenant
	after := waitScrape(t, base, 3*time.Minute, "1,000 tasks completed", func(s scrape) bool {
		n, _ := s.sum("taskmesh_tasks_completed_total", nil)
		return n == want && caughtUp(s)
	})
	values := after.labelValues()
	for id := range ids {
		if values[id] {
			t.Fatalf("a series is labelled with task id %s", id)
		}
	}
	// No tenant was refused, so no series names one.
	for i := range tenants {
		if tenant := fmt.Sprintf("load-%02d", i); values[tenant] {
			t.Fatalf("a series is labelled with tenant %s", tenant)
		}
	}
	_, tmBefore := before.series()
	all, tmAfter := after.series()
	t.Logf("series: %d Taskmesh before, %d after 1,000 tasks of 20 tenants (%d in all)", tmBefore, tmAfter, all)
	// New routes and codes (admin calls, no-op tasks' histogram buckets
	// in a new ClusterQueue) may add a few series; tasks or tenants must
	// not.
	if tmAfter-tmBefore > 100 || all > 3000 {
		t.Fatalf("series grew from %d to %d Taskmesh series (%d in all): unbounded labels?\n%s",
			tmBefore, tmAfter, all, taskmeshLines(after.text))
	}
}

// A --metrics-addr that cannot be listened on stops the process at start
// with an error naming the flag, before it touches anything else.
func TestMetricsAddrInUseFailsAtStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "scheduler", "--internal-token-file", token, "--metrics-addr", taken.Addr().String(),
		"--database-url", "postgres://nobody@127.0.0.1:1/none")
	cmd.Env = append(os.Environ(), "TASKMESH_TEST_AS_BINARY=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--metrics-addr") || !strings.Contains(string(out), "address already in use") {
		t.Fatalf("scheduler with a taken --metrics-addr: %v\n%s", err, out)
	}
}
