package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// The acceptance tests of task groups, repeats and templates: the real
// stack (Postgres, the Kafka-protocol broker, every service) with agents
// as separate processes; what happened is read back from the event log.

// schedulerDB opens the scheduler's schema.
func (w *world) schedulerDB() *pgxpool.Pool {
	w.t.Helper()
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema, MaxConns: 4})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(pool.Close)
	return pool
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// createGroup posts a group and returns its id.
// createGroup creates a group and starts it, as a client of the design's
// create-then-start routes does, unless body says "start" itself (true:
// it starts at creation; false: it stays pending).
func (w *world) createGroup(key string, body map[string]any) string {
	w.t.Helper()
	code, g, _ := w.call("POST", "/api/v1/task-groups", key, body)
	if code != 200 {
		w.t.Fatalf("create group: %d %v", code, g)
	}
	id := g["id"].(string)
	if _, said := body["start"]; !said {
		if g["status"] != "pending" {
			w.t.Fatalf("a group created without start is %v, want pending", g["status"])
		}
		if code, g, _ := w.call("POST", "/api/v1/task-groups/"+id+"/start", key, map[string]any{}); code != 200 {
			w.t.Fatalf("start group: %d %v", code, g)
		}
	}
	return id
}

func (w *world) group(key, id string) map[string]any {
	w.t.Helper()
	code, g, _ := w.call("GET", "/api/v1/task-groups/"+id, key, nil)
	if code != 200 {
		w.t.Fatalf("get group %s: %d %v", id, code, g)
	}
	return g
}

// waitGroup polls the group until cond holds.
func (w *world) waitGroup(key, id string, d time.Duration, what string, cond func(g map[string]any) bool) map[string]any {
	w.t.Helper()
	var g map[string]any
	waitFor(w.t, d, what, func() bool { g = w.group(key, id); return cond(g) })
	return g
}

// settledAs: the group ended with status and every member has ended.
func settledAs(status string) func(g map[string]any) bool {
	return func(g map[string]any) bool {
		c, _ := g["counts"].(map[string]any)
		open := 0.0
		for _, s := range []string{"pending", "assigned", "running", "preempted", "suspended"} {
			n, _ := c[s].(float64)
			open += n
		}
		return g["status"] == status && open == 0
	}
}

// members maps member ids to their summaries.
func members(g map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := g["tasks"].([]any)
	for _, m := range list {
		mm := m.(map[string]any)
		out[mm["id"].(string)] = mm
	}
	return out
}

// span is a task's run as the event log has it.
type span struct {
	task, agent       string
	started, ended    time.Time
	leases, successes int
}

// spans reads, for every task of group id, when it started and ended
// (TaskStarted, and TaskSucceeded or TaskFailed), which agent ran it, and
// how many leases and successes it had.
func spans(t *testing.T, pool *pgxpool.Pool, group string) map[string]*span {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT e.aggregate_id, e.event_type, e.occurred_at, coalesce(t.agent_id, '')
		FROM events e JOIN tasks t ON t.id = e.aggregate_id
		WHERE t.group_id = $1 AND e.event_type IN ('TaskLeased', 'TaskStarted', 'TaskSucceeded', 'TaskFailed')
		ORDER BY e.occurred_at`, group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]*span{}
	for rows.Next() {
		var id, typ, agent string
		var at time.Time
		if err := rows.Scan(&id, &typ, &at, &agent); err != nil {
			t.Fatal(err)
		}
		s := out[id]
		if s == nil {
			s = &span{task: id, agent: agent}
			out[id] = s
		}
		switch typ {
		case "TaskLeased":
			s.leases++
		case "TaskStarted":
			s.started = at
		case "TaskSucceeded":
			s.successes++
			s.ended = at
		case "TaskFailed":
			s.ended = at
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A group is created pending and runs nothing until its start route
// starts it (decision 0103); "start": true starts it at creation. A
// group cancelled before its start cannot be started (30002).
func TestGroupsWaitForTheirStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	body := func() map[string]any {
		return map[string]any{"mode": "serial", "tasks": []map[string]any{{"name": "a", "command": "true"}, {"name": "b", "command": "true"}}}
	}
	code, g, _ := w.call("POST", "/api/v1/task-groups", key, body())
	if code != 200 || g["status"] != "pending" {
		t.Fatalf("create = %d %v, want a pending group", code, g)
	}
	// Null until there is one, as a task's (decision 0104).
	if e, ok := g["error"]; !ok || e != nil {
		t.Fatalf("a pending group's error = %v (present %v), want null", e, ok)
	}
	id := g["id"].(string)
	time.Sleep(time.Second) // an agent is polling: nothing may reach it
	if code, ids, _, _ := w.listIDs(key, "group_id="+id); code != 200 || len(ids) != 0 {
		t.Fatalf("a pending group has tasks %v", ids)
	}
	if g := w.group(key, id); g["status"] != "pending" {
		t.Fatalf("before its start the group is %v", g["status"])
	}
	if code, g, _ := w.call("POST", "/api/v1/task-groups/"+id+"/start", key, map[string]any{}); code != 200 || g["status"] != "running" {
		t.Fatalf("start = %d %v", code, g)
	}
	if g := w.waitGroup(key, id, 30*time.Second, "the started group to complete", settledAs("completed")); g["error"] != nil {
		t.Errorf("a completed group's error = %v, want null", g["error"])
	}

	at := body()
	at["start"] = true
	if code, g, _ := w.call("POST", "/api/v1/task-groups", key, at); code != 200 || g["status"] != "running" {
		t.Fatalf("create with start true = %d %v", code, g)
	}

	code, g, _ = w.call("POST", "/api/v1/task-groups", key, body())
	if code != 200 {
		t.Fatalf("create = %d %v", code, g)
	}
	id = g["id"].(string)
	if code, g, _ := w.call("POST", "/api/v1/task-groups/"+id+"/cancel", key, map[string]any{}); code != 200 || g["status"] != "cancelled" {
		t.Fatalf("cancel a pending group = %d %v", code, g)
	}
	if code, g, _ := w.call("POST", "/api/v1/task-groups/"+id+"/start", key, map[string]any{}); code != 409 || g["code"] != float64(30002) {
		t.Errorf("start a group cancelled before its start = %d %v, want 409/30002", code, g)
	}
}

// The documented DAG: process1 and process2 run at the same time on two
// agents (their running intervals overlap in the event log), and merge
// starts only after both completed. A branch's interval in the log begins
// when the server records its start, which an agent sends alongside the
// spawn: on a loaded machine it came half a second and more after the
// process began (a 1.5 s branch spanned 1.06 s in the log), so the
// branches run for 3 s, long enough that two branches running together
// still overlap in the log.
func TestDAGBranchesRunConcurrentlyOnTwoAgents(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	w.startAgent("agent-2", w.agentToken("agent-2"), 1)
	task := func(id, secs string, deps ...string) map[string]any {
		return map[string]any{"id": id, "name": id, "command": "sleep", "args": []string{secs}, "depends_on": deps}
	}
	id := w.createGroup(key, map[string]any{"name": "etl", "mode": "dag", "tasks": []any{
		task("download", "0.2"), task("process1", "3", "download"), task("process2", "3", "download"),
		task("merge", "0.2", "process1", "process2")}})
	g := w.waitGroup(key, id, 60*time.Second, "the DAG to complete", settledAs("completed"))
	m := members(g)
	runs := spans(t, w.schedulerDB(), id)
	at := func(member string) *span {
		s := runs[m[member]["task_id"].(string)]
		if s == nil || s.started.IsZero() || s.ended.IsZero() {
			t.Fatalf("%s ran as %+v", member, s)
		}
		return s
	}
	p1, p2, merge, download := at("process1"), at("process2"), at("merge"), at("download")
	if !p1.started.Before(p2.ended) || !p2.started.Before(p1.ended) {
		t.Fatalf("process1 %v–%v and process2 %v–%v did not overlap", p1.started, p1.ended, p2.started, p2.ended)
	}
	if p1.agent == p2.agent {
		t.Fatalf("both branches ran on %s", p1.agent)
	}
	if merge.started.Before(p1.ended) || merge.started.Before(p2.ended) || p1.started.Before(download.ended) {
		t.Fatalf("merge started %v before both branches ended (%v, %v)", merge.started, p1.ended, p2.ended)
	}
}

// Serial with a failing middle member: the group fails and the last member
// never starts. A DAG with a failing branch: its descendants are
// cancelled, the other branch completes, the group fails.
func TestFailuresInSerialAndDAGGroups(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	pool := w.schedulerDB()
	step := func(id, cmd string, deps ...string) map[string]any {
		return map[string]any{"id": id, "name": id, "command": cmd, "max_retries": 0, "depends_on": deps}
	}
	serial := w.createGroup(key, map[string]any{"mode": "serial", "tasks": []any{
		map[string]any{"id": "first", "name": "first", "command": "true"},
		map[string]any{"id": "middle", "name": "middle", "command": "false", "max_retries": 0},
		map[string]any{"id": "last", "name": "last", "command": "true"}}})
	dag := w.createGroup(key, map[string]any{"mode": "dag", "tasks": []any{
		step("root", "true"), step("bad", "false", "root"), step("after-bad", "true", "bad"), step("after-after", "true", "after-bad"),
		step("good", "true", "root"), step("after-good", "true", "good")}})

	g := w.waitGroup(key, serial, 60*time.Second, "the serial group to fail", settledAs("failed"))
	m := members(g)
	if m["first"]["status"] != "completed" || m["middle"]["status"] != "failed" || m["last"]["status"] != "cancelled" ||
		g["error"] != "task middle failed" {
		t.Fatalf("serial group %v", g)
	}
	if runs := spans(t, pool, serial); runs[m["last"]["task_id"].(string)] != nil {
		t.Fatalf("the last member ran: %+v", runs[m["last"]["task_id"].(string)])
	}
	// Starting a group that has started (at creation) changes nothing: the
	// answer is the group as it is, every member included.
	code, again, _ := w.call("POST", "/api/v1/task-groups/"+serial+"/start", key, map[string]any{})
	if tasks, _ := again["tasks"].([]any); code != 200 || again["status"] != "failed" || len(tasks) != 3 || again["version"] != g["version"] {
		t.Fatalf("start of the ended serial group = %d %v", code, again)
	}

	g = w.waitGroup(key, dag, 60*time.Second, "the DAG to fail", settledAs("failed"))
	m = members(g)
	want := map[string]string{"root": "completed", "bad": "failed", "after-bad": "cancelled", "after-after": "cancelled",
		"good": "completed", "after-good": "completed"}
	for k, s := range want {
		if m[k]["status"] != s {
			t.Errorf("%s is %v, want %s", k, m[k]["status"], s)
		}
	}
	runs := spans(t, pool, dag)
	for _, k := range []string{"after-bad", "after-after"} {
		if runs[m[k]["task_id"].(string)] != nil {
			t.Errorf("%s ran", k)
		}
	}
}

// The group list pages by number and by offset as the task list does,
// and refuses, in the envelope, a start it cannot serve.
func TestGroupListPagesByNumberAndOffset(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	var ids []string // oldest first
	for i := range 5 {
		code, g, _ := w.call("POST", "/api/v1/task-groups", key, map[string]any{"name": fmt.Sprint("g", i), "mode": "serial",
			"tasks": []map[string]any{{"name": "a", "command": "true"}}})
		if code != 200 {
			t.Fatalf("create = %d %v", code, g)
		}
		ids = append(ids, g["id"].(string))
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	list := func(query string) ([]string, string) {
		t.Helper()
		code, body, _ := w.call("GET", "/api/v1/task-groups?"+query, key, nil)
		if code != 200 {
			t.Fatalf("?%s = %d %v", query, code, body)
		}
		var got []string
		for _, g := range body["groups"].([]any) {
			got = append(got, g.(map[string]any)["id"].(string))
		}
		return got, body["next_page_token"].(string)
	}
	for _, tt := range []struct {
		query    string
		want     []string
		lastPage bool
	}{
		{"page_size=2&page=1", newest[0:2], false},
		{"page_size=2&page=2", newest[2:4], false},
		{"page_size=2&page=3", newest[4:5], true},
		{"page_size=2&page=4", nil, true},
		{"page_size=2&offset=1", newest[1:3], false},
		{"offset=3", newest[3:5], true},
	} {
		got, next := list(tt.query)
		if !slices.Equal(got, tt.want) || (next == "") != tt.lastPage {
			t.Errorf("?%s = %v (next %q), want %v (last page %v)", tt.query, got, next, tt.want, tt.lastPage)
		}
	}
	// A numbered page's token pages on from it.
	_, next := list("page_size=2&page=2")
	if got, _ := list("page_size=2&page_token=" + next); !slices.Equal(got, newest[4:5]) {
		t.Errorf("the token of page 2 led to %v, want %v", got, newest[4:5])
	}
	for _, tt := range []struct{ query, want string }{
		{"page=2&page_token=" + next, "give one of them"},
		{"offset=2&page=2", "give one of them"},
		{"offset=10001", "offset"},
		{"page=5001&page_size=3", "starts 15000 task groups in"},
		{"page=-1", "page"},
	} {
		code, body, _ := w.call("GET", "/api/v1/task-groups?"+tt.query, key, nil)
		if code != 400 || body["code"] != float64(30005) || !strings.Contains(fmt.Sprint(body["message"]), tt.want) {
			t.Errorf("?%s = %d %v, want 400/30005 saying %q", tt.query, code, body, tt.want)
		}
	}
}

// A cycle, an unknown dependency, a duplicate id and an unknown queue are
// 400/30005 over REST, naming the member's field, and store nothing.
func TestInvalidGroupsAreRefusedAndStoreNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	pool := w.schedulerDB()
	rows := func() string {
		return fmt.Sprint(count(t, pool, `SELECT count(*) FROM events`), count(t, pool, `SELECT count(*) FROM tasks`),
			count(t, pool, `SELECT count(*) FROM task_groups`))
	}
	before := rows()
	node := func(id string, deps ...string) map[string]any {
		return map[string]any{"id": id, "name": id, "command": "true", "depends_on": deps}
	}
	for _, tt := range []struct {
		name  string
		tasks []any
		want  string
	}{
		{"cycle", []any{node("a", "c"), node("b", "a"), node("c", "b")}, "a → c → b → a"},
		{"unknown dependency", []any{node("a"), node("b", "ghost")}, `"ghost"`},
		{"duplicate id", []any{node("a"), node("a")}, `duplicate id "a"`},
		{"unknown queue", []any{node("a"), map[string]any{"id": "q", "name": "q", "command": "true", "queue": "nosuch"}},
			`invalid tasks[1].queue: queue "nosuch": unknown queue`},
	} {
		code, body, _ := w.call("POST", "/api/v1/task-groups", key, map[string]any{"mode": "dag", "tasks": tt.tasks})
		if code != 400 || body["code"] != float64(30005) || !strings.Contains(fmt.Sprint(body["message"]), tt.want) || body["data"] != nil {
			t.Errorf("%s: %d %v", tt.name, code, body)
		}
	}
	// A task of its own names the field too.
	code, body, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "q", "command": "true", "queue": "nosuch"})
	if code != 400 || body["code"] != float64(30005) || body["message"] != `invalid queue: queue "nosuch": unknown queue` {
		t.Errorf("a task with an unknown queue: %d %v", code, body)
	}
	if after := rows(); after != before {
		t.Fatalf("rows (events tasks groups): before %s, after %s", before, after)
	}
}

// repeat {count: 10, parallel: 5, interval_sec: 1}: never more than 5 runs
// at once, starts at least a second apart — from the event log. Each run
// lasts eight intervals, so the parallel limit is what holds the sixth
// back, and the fifth run starts before the first ends even when a busy
// machine delays some starts by up to four seconds more than others
// (with runs of 5.5 s, a start 1.5 s late on a loaded machine left only
// four running at once).
func TestRepeatHonoursParallelAndInterval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 4)
	w.startAgent("agent-2", w.agentToken("agent-2"), 4)
	id := w.createGroup(key, map[string]any{"repeat": map[string]any{"count": 10, "parallel": 5, "interval_sec": 1,
		"template": map[string]any{"name": "soak", "command": "sleep", "args": []string{"8"}}}})
	w.waitGroup(key, id, 3*time.Minute, "the repeat to complete", settledAs("completed"))
	runs := spans(t, w.schedulerDB(), id)
	if len(runs) != 10 {
		t.Fatalf("%d runs, want 10", len(runs))
	}
	var starts []time.Time
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		if r.started.IsZero() || r.ended.IsZero() || r.successes != 1 {
			t.Fatalf("run %+v", r)
		}
		starts = append(starts, r.started)
		edges = append(edges, edge{r.started, 1}, edge{r.ended, -1})
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < time.Second {
			t.Errorf("runs started %s apart (%v, %v)", gap, starts[i-1], starts[i])
		}
	}
	// Ends before starts at the same instant: a slot freed and taken.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	running, most := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	if most != 5 {
		t.Fatalf("at most %d runs at once, want exactly 5 (the limit, reached)", most)
	}
}

// A repeat with the defaults — no max_failures, no breaker, backoff_sec
// 0 — on a failing command is never ended by its failures, so its failed
// runs back off at a doubling pace: the third failure in a row waits 4 s,
// and next_run_at says when (decision 0126).
func TestUnboundedFailingRepeatBacksOff(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	created := time.Now()
	id := w.createGroup(key, map[string]any{"repeat": map[string]any{"count": 5,
		"template": map[string]any{"name": "always-fails", "command": "false"}}})
	g := w.waitGroup(key, id, 60*time.Second, "the third failure in a row, waiting", func(g map[string]any) bool {
		r, _ := g["repeat"].(map[string]any)
		return r["consecutive_failures"] == float64(3) && r["next_run_at"] != nil
	})
	// Three failures took at least the first two waits, 1 s and 2 s.
	if took := time.Since(created); took < 3*time.Second {
		t.Fatalf("three failures in %v: the runs did not back off", took)
	}
	var lastEnd time.Time
	members, _ := g["tasks"].([]any)
	for _, m := range members {
		m := m.(map[string]any)
		if m["status"] != "failed" {
			t.Fatalf("member %v is not failed while the repeat waits", m)
		}
		if end, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["ended_at"])); err != nil {
			t.Fatalf("member %v: ended_at: %v", m["id"], err)
		} else if end.After(lastEnd) {
			lastEnd = end
		}
	}
	r := g["repeat"].(map[string]any)
	next, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["next_run_at"]))
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 3 || r["failures"] != float64(3) || g["status"] != "running" || !next.Equal(lastEnd.Add(4*time.Second)) {
		t.Fatalf("after three failures: %d members, repeat %v, last run ended %v", len(members), r, lastEnd)
	}
}

// A breaker with threshold 3 on a failing command: exactly three failed
// runs, then none while it is open; a tenant's key cannot reset it (403),
// an operator's can, with a reason: runs resume, and the audit log has
// the operator, the reason and the time.
func TestCircuitBreakerAndOperatorReset(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	pool := w.schedulerDB()
	id := w.createGroup(key, map[string]any{"repeat": map[string]any{"count": 10, "circuit_breaker_threshold": 3,
		"template": map[string]any{"name": "flaky", "command": "false"}}})
	g := w.waitGroup(key, id, 60*time.Second, "the breaker to open", func(g map[string]any) bool {
		r, _ := g["repeat"].(map[string]any)
		return r["circuit_open"] == true
	})
	failedRuns := func() int {
		return count(t, pool, `SELECT count(*) FROM events e JOIN tasks t ON t.id = e.aggregate_id
			WHERE t.group_id = $1 AND e.event_type = 'TaskFailed'`, id)
	}
	r := g["repeat"].(map[string]any)
	if r["consecutive_failures"] != float64(3) || r["next_run_at"] != nil || g["status"] != "running" || failedRuns() != 3 {
		t.Fatalf("breaker opened at %v (failed runs %d)", g, failedRuns())
	}
	if n := count(t, pool, `SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = 'TaskGroupCircuitOpened'`, id); n != 1 {
		t.Fatalf("TaskGroupCircuitOpened recorded %d times", n)
	}
	code, body, _ := w.call("POST", "/api/v1/task-groups/"+id+"/repeat/reset", key, map[string]any{"reason": "let me"})
	if code != 403 || body["code"] != float64(403) {
		t.Fatalf("a tenant's reset: %d %v", code, body)
	}
	code, body, _ = w.call("POST", "/api/v1/tasks/repeat/reset", key, map[string]any{"group_id": id, "reason": "let me"})
	if code != 403 || body["code"] != float64(403) {
		t.Fatalf("a tenant's reset on the tasks route: %d %v", code, body)
	}
	adminKey, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(adminKey))
	if code, body, _ := w.call("POST", "/api/v1/task-groups/"+id+"/repeat/reset", admin, map[string]any{"reason": " "}); code != 400 || body["code"] != float64(30005) {
		t.Fatalf("a reset without a reason: %d %v", code, body)
	}
	for _, bad := range []struct {
		path string
		body map[string]any
		says string
	}{
		{"/api/v1/tasks/repeat/reset", map[string]any{"reason": "no group"}, "group_id is required"},
		{"/api/v1/task-groups/" + id + "/repeat/reset", map[string]any{"group_id": "tg-other", "reason": "two groups"}, "name different groups"},
	} {
		code, body, _ := w.call("POST", bad.path, admin, bad.body)
		if code != 400 || body["code"] != float64(30005) || !strings.Contains(fmt.Sprint(body["message"]), bad.says) {
			t.Fatalf("POST %s %v: %d %v", bad.path, bad.body, code, body)
		}
	}
	// Nothing ran while the breaker was open: still three runs, the
	// first attempt and two retries of run 1.
	if total := count(t, pool, `SELECT count(*) FROM tasks WHERE group_id = $1`, id); total != 3 || failedRuns() != 3 {
		t.Fatalf("%d runs (%d failed) while the breaker was open", total, failedRuns())
	}
	// The document's second route, naming the group in the body.
	code, body, _ = w.call("POST", "/api/v1/tasks/repeat/reset", admin, map[string]any{"group_id": id, "reason": "stress rig repaired"})
	if code != 200 || body["id"] != id || body["repeat"].(map[string]any)["circuit_open"] != false {
		t.Fatalf("operator reset: %d %v", code, body)
	}
	waitFor(t, 30*time.Second, "runs to resume", func() bool { return failedRuns() > 3 })
	// The reset in the group's tenant's audit log (the consumers service's).
	var entry map[string]any
	waitFor(t, 20*time.Second, "the reset's audit record", func() bool {
		_, body, _ := w.call("GET", "/api/v1/audit-logs?resource=task_group&action=repeat_reset&resource_id="+id, key, nil)
		l, _ := body["audit_logs"].([]any)
		if len(l) == 1 {
			entry, _ = l[0].(map[string]any)
		}
		return entry != nil
	})
	var details map[string]any
	_ = json.Unmarshal([]byte(fmt.Sprint(entry["details"])), &details)
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(entry["timestamp"]))
	if user := fmt.Sprint(entry["user_id"]); user == "" || details["operator"] != user || details["reason"] != "stress rig repaired" ||
		err != nil || time.Since(at) > time.Minute {
		t.Fatalf("audit record: %v (details %v, time %v)", entry, details, err)
	}
	if code, _, _ := w.call("POST", "/api/v1/task-groups/"+id+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
}

// Templates end to end: every variable type reaches the process; every bad
// variable is 30005 and creates nothing; a hostile value is one literal
// argument.
func TestTemplatesEndToEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	pool := w.schedulerDB()
	tpl := map[string]any{"id": "show", "name": "show", "command": "printf", "args": []string{"<%s>\n", "{{s}}", "{{i}}", "{{b}}", "{{sel}}"},
		"variables": []any{
			map[string]any{"name": "s", "type": "string", "required": true},
			map[string]any{"name": "i", "type": "int", "default": "7"},
			map[string]any{"name": "b", "type": "bool", "default": "false"},
			map[string]any{"name": "sel", "type": "select", "options": []string{"red", "blue"}, "default": "red"}}}
	if code, body, _ := w.call("POST", "/api/v1/templates", key, tpl); code != 200 || body["id"] != "show" || body["created_by"] == "" {
		t.Fatalf("create: %d %v", code, body)
	}
	if code, body, _ := w.call("POST", "/api/v1/templates", key, map[string]any{"id": "broken", "name": "b", "command": "echo",
		"args": []string{"{{x}}"}}); code != 400 || body["code"] != float64(30005) || !strings.Contains(fmt.Sprint(body["message"]), "{{x}}") {
		t.Fatalf("a placeholder without a variable: %d %v", code, body)
	}
	tasks := func() int { return count(t, pool, `SELECT count(*) FROM tasks`) }
	before := tasks()
	for _, tt := range []struct {
		name string
		vars map[string]any
		want string
	}{
		{"unknown", map[string]any{"s": "x", "nope": 1}, "variables.nope"},
		{"missing required", map[string]any{"i": 1}, "variables.s"},
		{"int of text", map[string]any{"s": "x", "i": "ten"}, "variables.i"},
		{"int of a fraction", map[string]any{"s": "x", "i": 1.5}, "variables.i"},
		{"bool of text", map[string]any{"s": "x", "b": "yes"}, "variables.b"},
		{"select outside", map[string]any{"s": "x", "sel": "green"}, "variables.sel"},
		{"string of a number", map[string]any{"s": 5}, "variables.s: variable s must be a string, not a number"},
		{"string of an object", map[string]any{"s": map[string]any{"x": 1}}, "variables.s: variable s must be a string, not an object"},
		{"string of an array", map[string]any{"s": []any{"x"}}, "variables.s: variable s must be a string, not an array"},
		{"int of an object", map[string]any{"s": "x", "i": map[string]any{}}, "variables.i: variable i must be an integer, not an object"},
		{"bool of an array", map[string]any{"s": "x", "b": []any{true}}, "variables.b: variable b must be true or false, not an array"},
		{"select of a boolean", map[string]any{"s": "x", "sel": true}, "variables.sel: variable sel must be one of red, blue, not a boolean"},
		{"required of null", map[string]any{"s": nil}, "variables.s: variable s is required"},
	} {
		code, body, _ := w.call("POST", "/api/v1/templates/show/run", key, map[string]any{"variables": tt.vars})
		if code != 400 || body["code"] != float64(30005) || !strings.Contains(fmt.Sprint(body["message"]), tt.want) {
			t.Errorf("%s: %d %v", tt.name, code, body)
		}
	}
	if tasks() != before {
		t.Fatalf("refused runs created %d tasks", tasks()-before)
	}
	run := func(vars map[string]any) map[string]any {
		code, body, _ := w.call("POST", "/api/v1/templates/show/run", key, map[string]any{"variables": vars})
		if code != 200 {
			t.Fatalf("run: %d %v", code, body)
		}
		return w.waitStatus(key, body["id"].(string), 30*time.Second, "completed")
	}
	typed := run(map[string]any{"s": "text", "i": 42, "b": true, "sel": "blue"})
	if typed["stdout"] != "<text>\n<42>\n<true>\n<blue>\n" {
		t.Fatalf("typed stdout %q", typed["stdout"])
	}
	hostile := `"; rm -rf / #`
	got := run(map[string]any{"s": hostile})
	if got["stdout"] != "<"+hostile+">\n<7>\n<false>\n<red>\n" {
		t.Fatalf("hostile stdout %q: the value was not one literal argument", got["stdout"])
	}
}

// Another tenant's group or template is 404/30004 on every route (the
// repeat reset, an operator's route, is 403 for any tenant's key).
func TestOtherTenantsGroupsAndTemplatesAreNotFound(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	owner := w.s.DemoAPIKey
	other := w.tenantKey("other")
	id := w.createGroup(owner, map[string]any{"mode": "parallel", "start": false, "tasks": []any{
		map[string]any{"name": "a", "command": "true"}}})
	if code, body, _ := w.call("POST", "/api/v1/templates", owner, map[string]any{"id": "mine", "name": "mine", "command": "true"}); code != 200 {
		t.Fatalf("template: %d %v", code, body)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/v1/task-groups/" + id},
		{"POST", "/api/v1/task-groups/" + id + "/start"},
		{"POST", "/api/v1/task-groups/" + id + "/cancel"},
		{"DELETE", "/api/v1/task-groups/" + id},
		{"GET", "/api/v1/task-groups/" + id + "/events"},
		{"GET", "/api/v1/templates/mine"},
		{"PUT", "/api/v1/templates/mine"},
		{"DELETE", "/api/v1/templates/mine"},
		{"POST", "/api/v1/templates/mine/run"},
	} {
		var body any = map[string]any{}
		if r.method == "PUT" {
			body = map[string]any{"name": "x", "command": "true"}
		}
		if r.method == "GET" || r.method == "DELETE" {
			body = nil
		}
		code, resp, _ := w.call(r.method, r.path, other, body)
		if code != http.StatusNotFound || resp["code"] != float64(30004) {
			t.Errorf("%s %s as another tenant: %d %v", r.method, r.path, code, resp)
		}
		// The message names what is missing.
		want := map[bool]string{true: "template not found", false: "task group not found"}[strings.HasPrefix(r.path, "/api/v1/templates/")]
		if resp["message"] != want {
			t.Errorf("%s %s as another tenant: message %q, want %q", r.method, r.path, resp["message"], want)
		}
	}
	if code, resp := w.wsStatus(other, "/api/v1/task-groups/"+id+"/ws"); code != http.StatusNotFound || resp["code"] != float64(30004) {
		t.Errorf("the group's WebSocket as another tenant: %d %v", code, resp)
	}
	if code, resp, _ := w.call("POST", "/api/v1/task-groups/"+id+"/repeat/reset", other, map[string]any{"reason": "x"}); code != 403 {
		t.Errorf("reset as another tenant: %d %v", code, resp)
	}
	code, list, _ := w.call("GET", "/api/v1/task-groups", other, nil)
	if groups, _ := list["groups"].([]any); code != 200 || len(groups) != 0 {
		t.Errorf("another tenant's list: %d %v", code, list)
	}
	code, list, _ = w.call("GET", "/api/v1/templates", other, nil)
	if tpls, _ := list["templates"].([]any); code != 200 || len(tpls) != 0 {
		t.Errorf("another tenant's template list: %d %v", code, list)
	}
	// The owner still has both, untouched.
	if g := w.group(owner, id); g["status"] != "pending" {
		t.Fatalf("owner's group %v", g)
	}
}

// wsStatus opens a WebSocket route without upgrading far enough to stream
// and returns the refusal.
func (w *world) wsStatus(key, path string) (int, map[string]any) {
	w.t.Helper()
	req, err := http.NewRequest("GET", w.s.HTTPURL+path, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}
