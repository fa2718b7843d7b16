package localapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// fake is a journal and backend in memory.
type fake struct {
	tasks     []journal.Task
	cancelErr error
	submitted int
	// cancels are the graces the cancels passed (nil: the task's own).
	cancels []*time.Duration
	// fences are the fences the creations passed, renewals the fences
	// the renewals passed.
	fences   []Fence
	renewals []time.Duration
}

func (f *fake) Latest(_ context.Context, id string) (journal.Task, error) {
	for _, t := range f.tasks {
		if t.ID == id {
			return t, nil
		}
	}
	return journal.Task{}, journal.ErrNotFound
}

func (f *fake) List(_ context.Context, status string, _ int) ([]journal.Task, error) {
	var out []journal.Task
	for _, t := range f.tasks {
		if status == "" || t.Status == status {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fake) SubmitWithFence(_ context.Context, spec *taskv1.TaskSpec, fence Fence) (journal.Task, error) {
	f.submitted++
	f.fences = append(f.fences, fence)
	return journal.Task{ID: "new", AttemptID: "att-new", AssignedAgentID: "a", Name: spec.GetName(),
		Status: journal.StatusPending, Origin: journal.OriginLocal}, nil
}

func (f *fake) Cancel(_ context.Context, id string, grace *time.Duration) (journal.Task, error) {
	f.cancels = append(f.cancels, grace)
	if f.cancelErr != nil {
		return journal.Task{}, f.cancelErr
	}
	return f.Latest(context.Background(), id)
}

func (f *fake) RenewFence(_ context.Context, id string, d time.Duration) (journal.Task, error) {
	t, err := f.Latest(context.Background(), id)
	if err != nil {
		return journal.Task{}, rpcerr.New(rpcerr.TaskNotFound, "task "+id+" not found")
	}
	f.renewals = append(f.renewals, d)
	return t, nil
}

func (f *fake) Status(context.Context) (QueueStatus, error) {
	return QueueStatus{AgentID: "a", Slots: 4, Running: 1, LastHeartbeat: time.Unix(1770292800, 0)}, nil
}

func TestHandler(t *testing.T) {
	code := 0
	f := &fake{tasks: []journal.Task{{ID: "t1", Name: "one", Status: journal.StatusCompleted, ExitCode: &code,
		Stdout: "hi\n", Origin: journal.OriginLocal, Synced: true, EndedAt: time.Unix(1770292800, 0)}}}
	srv := httptest.NewServer(Handler(context.Background(), NewServer(f, f), Options{}))
	defer srv.Close()

	tests := []struct {
		name, method, path, body string
		cancelErr                error
		wantHTTP                 int
		want                     map[string]any // subset of the JSON answer
	}{
		{name: "get", method: "GET", path: "/api/v1/tasks/t1", wantHTTP: 200,
			want: map[string]any{"id": "t1", "exit_code": float64(0), "stdout": "hi\n", "synced": true,
				"ended_at": "2026-02-05T12:00:00Z", "assigned_agent_id": ""}},
		{name: "list", method: "GET", path: "/api/v1/tasks", wantHTTP: 200},
		{name: "list by status", method: "GET", path: "/api/v1/tasks?status=completed&limit=10", wantHTTP: 200},
		// A status no task has is refused, as the server's task list does.
		{name: "list by unknown status", method: "GET", path: "/api/v1/tasks?status=done", wantHTTP: 400,
			want: map[string]any{"code": float64(30005), "data": nil}},
		{name: "create", method: "POST", path: "/api/v1/tasks", body: `{"name":"x","command":"echo"}`, wantHTTP: 200,
			// No exit code yet: null, not a missing key. Waiting in the
			// queue, nothing has taken it: no attempt, no agent yet.
			want: map[string]any{"id": "new", "status": "pending", "origin": "local", "exit_code": nil, "stdout": "",
				"attempt_id": "", "assigned_agent_id": "", "assigned_at": nil, "started_at": nil}},
		{name: "queue status", method: "GET", path: "/api/v1/queue/status", wantHTTP: 200,
			want: map[string]any{"agent_id": "a", "slots": float64(4), "running": float64(1), "last_heartbeat_at": "2026-02-05T12:00:00Z"}},
		{name: "not found", method: "GET", path: "/api/v1/tasks/zz", wantHTTP: 404,
			want: map[string]any{"code": float64(30004), "message": "task zz not found", "data": nil}},
		{name: "conflict", method: "POST", path: "/api/v1/tasks/t1/cancel", body: "{}", wantHTTP: 409,
			cancelErr: rpcerr.New(rpcerr.TaskImmutable, "task t1 is already completed"),
			want:      map[string]any{"code": float64(30002), "message": "task t1 is already completed", "data": nil}},
		{name: "internal", method: "POST", path: "/api/v1/tasks/t1/cancel", body: "{}", wantHTTP: 500,
			cancelErr: rpcerr.New(rpcerr.Internal, "disk full"),
			want:      map[string]any{"code": float64(30099), "message": "disk full", "data": nil}},
		{name: "unknown field", method: "POST", path: "/api/v1/tasks", body: `{"name":"x","bogus":1}`, wantHTTP: 400,
			want: map[string]any{"code": float64(30005), "data": nil}},
		{name: "no route", method: "GET", path: "/api/v1/nothing", wantHTTP: 404,
			want: map[string]any{"code": float64(30004), "data": nil}},
		{name: "wrong method", method: "DELETE", path: "/api/v1/tasks", wantHTTP: 405,
			want: map[string]any{"code": float64(30005), "data": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.cancelErr = tc.cancelErr
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("body: %v", err)
			}
			if resp.StatusCode != tc.wantHTTP {
				t.Errorf("HTTP %d, want %d (%v)", resp.StatusCode, tc.wantHTTP, got)
			}
			for k, v := range tc.want {
				if gv, ok := got[k]; !ok || gv != v {
					t.Errorf("%s = %v (present %v), want %v", k, gv, ok, v)
				}
			}
		})
	}
}

// TestCancelGrace: a cancel passes its grace_period_sec on, 0 included;
// without one, the task's own applies; one out of range is refused and
// stops nothing.
func TestCancelGrace(t *testing.T) {
	f := &fake{tasks: []journal.Task{{ID: "t1", Status: journal.StatusRunning, Origin: journal.OriginLocal}}}
	srv := httptest.NewServer(Handler(context.Background(), NewServer(f, f), Options{}))
	defer srv.Close()
	post := func(body string) (int, map[string]any) { return postJSON(t, srv.URL+"/api/v1/tasks/t1/cancel", body) }
	for _, tc := range []struct {
		body string
		want *time.Duration
	}{
		{`{}`, nil},
		{`{"grace_period_sec": 5}`, ptr(5 * time.Second)},
		{`{"grace_period_sec": 0}`, ptr(time.Duration(0))},
	} {
		f.cancels = nil
		if code, got := post(tc.body); code != 200 {
			t.Fatalf("%s: HTTP %d %v", tc.body, code, got)
		}
		if len(f.cancels) != 1 || (f.cancels[0] == nil) != (tc.want == nil) || (tc.want != nil && *f.cancels[0] != *tc.want) {
			t.Fatalf("%s: cancels %v, want one with %v", tc.body, f.cancels, tc.want)
		}
	}
	for _, body := range []string{`{"grace_period_sec": -1}`, `{"grace_period_sec": 3601}`} {
		f.cancels = nil
		code, got := post(body)
		if code != 400 || got["code"] != float64(30005) {
			t.Fatalf("%s: HTTP %d %v, want 400 with code 30005", body, code, got)
		}
		if len(f.cancels) != 0 {
			t.Fatalf("%s: a refused cancel stopped the task", body)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// postJSON posts body to url and returns the HTTP status and the decoded
// answer.
func postJSON(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	return resp.StatusCode, got
}

// TestFenceParameters: a creation passes its fence_ms and fence_grace_ms
// on (none without them); a renewal its fence_ms, 0 included, and
// answers with the task. Values out of range, a grace without a fence, an
// unknown field and an unknown task are refused in the local API's
// envelope, and reach nothing.
func TestFenceParameters(t *testing.T) {
	f := &fake{tasks: []journal.Task{{ID: "t1", Name: "one", Status: journal.StatusRunning, Origin: journal.OriginLocal}}}
	srv := httptest.NewServer(Handler(context.Background(), NewServer(f, f), Options{}))
	defer srv.Close()
	post := func(path, body string) (int, map[string]any) { return postJSON(t, srv.URL+path, body) }
	spec := `{"name":"x","command":"echo"}`
	for _, tc := range []struct {
		query string
		want  Fence
	}{
		{"", Fence{}},
		{"?fence_ms=12000", Fence{Length: 12 * time.Second}},
		{"?fence_ms=1000&fence_grace_ms=0", Fence{Length: time.Second}},
		{"?fence_ms=3600000&fence_grace_ms=2500", Fence{Length: time.Hour, Grace: 2500 * time.Millisecond}},
	} {
		f.fences = nil
		if code, got := post("/api/v1/tasks"+tc.query, spec); code != 200 {
			t.Fatalf("create%s: HTTP %d %v", tc.query, code, got)
		}
		if len(f.fences) != 1 || f.fences[0] != tc.want {
			t.Fatalf("create%s passed %v, want one %v", tc.query, f.fences, tc.want)
		}
	}
	for _, query := range []string{"?fence_ms=999", "?fence_ms=0", "?fence_ms=3600001", "?fence_ms=-5",
		"?fence_grace_ms=100", "?fence_ms=5000&fence_grace_ms=60001", "?fence_ms=5000&fence_grace_ms=-1", "?fence_ms=soon"} {
		f.submitted = 0
		code, got := post("/api/v1/tasks"+query, spec)
		if code != 400 || got["code"] != float64(30005) {
			t.Fatalf("create%s: HTTP %d %v, want 400 with code 30005", query, code, got)
		}
		if f.submitted != 0 {
			t.Fatalf("create%s: a refused creation queued a task", query)
		}
	}

	for _, tc := range []struct {
		body string
		want time.Duration
	}{
		{`{"fence_ms": 12000}`, 12 * time.Second},
		{`{"fence_ms": 0}`, 0},
		{`{}`, 0},
	} {
		f.renewals = nil
		code, got := post("/api/v1/tasks/t1/fence", tc.body)
		if code != 200 || got["id"] != "t1" || got["status"] != "running" {
			t.Fatalf("renew %s: HTTP %d %v, want 200 with the task", tc.body, code, got)
		}
		if len(f.renewals) != 1 || f.renewals[0] != tc.want {
			t.Fatalf("renew %s passed %v, want one %v", tc.body, f.renewals, tc.want)
		}
	}
	for _, tc := range []struct {
		path, body string
		http, code int
	}{
		{"/api/v1/tasks/t1/fence", `{"fence_ms": -1}`, 400, 30005},
		{"/api/v1/tasks/t1/fence", `{"fence_ms": 3600001}`, 400, 30005},
		{"/api/v1/tasks/t1/fence", `{"fence_ms": "soon"}`, 400, 30005},
		{"/api/v1/tasks/t1/fence", `{"fence_ms": 1000, "grace": 1}`, 400, 30005},
		{"/api/v1/tasks/zz/fence", `{"fence_ms": 1000}`, 404, 30004},
	} {
		f.renewals = nil
		code, got := post(tc.path, tc.body)
		if code != tc.http || got["code"] != float64(tc.code) {
			t.Fatalf("renew %s %s: HTTP %d %v, want %d with code %d", tc.path, tc.body, code, got, tc.http, tc.code)
		}
		if tc.code == 30005 && len(f.renewals) != 0 {
			t.Fatalf("renew %s: a refused renewal reached the agent", tc.body)
		}
	}
}

// TestExitCodeIsNullUntilSet: a local task without an exit code shows
// "exit_code": null, in a list too; one with an exit code shows it, 0
// included. Likewise "error": null without an error.
func TestExitCodeIsNullUntilSet(t *testing.T) {
	code, failed := 0, 1
	f := &fake{tasks: []journal.Task{
		{ID: "t1", Name: "one", Status: journal.StatusCompleted, ExitCode: &code, Origin: journal.OriginServer,
			LastHeartbeatAt: time.Date(2026, 2, 5, 12, 4, 55, 0, time.UTC)},
		{ID: "t2", Name: "two", Status: journal.StatusPending, Origin: journal.OriginLocal},
		{ID: "t3", Name: "three", Status: journal.StatusFailed, ExitCode: &failed, Error: "exit code 1", Origin: journal.OriginLocal},
	}}
	srv := httptest.NewServer(Handler(context.Background(), NewServer(f, f), Options{}))
	defer srv.Close()
	get := func(path string, into any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var list struct {
		Tasks []map[string]any `json:"tasks"`
	}
	get("/api/v1/tasks", &list)
	if len(list.Tasks) != 3 {
		t.Fatalf("tasks = %v", list.Tasks)
	}
	for _, task := range list.Tasks {
		v, ok := task["exit_code"]
		switch task["id"] {
		case "t1":
			if !ok || v != float64(0) {
				t.Errorf("t1 exit_code = %v (present %v), want 0", v, ok)
			}
			if task["last_heartbeat_at"] != "2026-02-05T12:04:55Z" {
				t.Errorf("t1 last_heartbeat_at = %v", task["last_heartbeat_at"])
			}
			if v, ok := task["error"]; !ok || v != nil {
				t.Errorf("t1 error = %v (present %v), want null", v, ok)
			}
		case "t3":
			if task["exit_code"] != float64(1) || task["error"] != "exit code 1" {
				t.Errorf("t3 = %v", task)
			}
		case "t2":
			if !ok || v != nil {
				t.Errorf("t2 exit_code = %v (present %v), want null", v, ok)
			}
			if v, ok := task["last_heartbeat_at"]; !ok || v != nil {
				t.Errorf("t2 last_heartbeat_at = %v (present %v), want null", v, ok)
			}
			if v, ok := task["error"]; !ok || v != nil {
				t.Errorf("t2 error = %v (present %v), want null", v, ok)
			}
		}
		if task["name"] == "" || task["status"] == "" {
			t.Errorf("task = %v", task)
		}
	}
	var one map[string]any
	get("/api/v1/tasks/t2", &one)
	if v, ok := one["exit_code"]; !ok || v != nil || one["id"] != "t2" || one["status"] != "pending" {
		t.Errorf("t2 = %v", one)
	}
}

// What a web page in a browser on the agent's machine can send is refused
// and changes nothing: a cross-origin POST with a body that needs no
// preflight, a request the browser marks as a page's, and a request to a
// name rebound to 127.0.0.1 (DNS rebinding). Programs naming the API by
// an address or localhost are answered.
func TestBrowsersAreRefused(t *testing.T) {
	f := &fake{tasks: []journal.Task{{ID: "t1", Name: "one", Status: journal.StatusRunning}}}
	srv := httptest.NewServer(Handler(context.Background(), NewServer(f, f), Options{}))
	defer srv.Close()
	_, port, _ := strings.Cut(srv.URL, "127.0.0.1:")
	create := `{"type":"script","command":"id"}`
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
		says                     string
	}{
		{"a cross-origin text/plain POST", "POST", "/api/v1/tasks", create,
			map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, 403, "Origin header"},
		{"a same-origin POST after rebinding", "POST", "/api/v1/tasks", create,
			map[string]string{"Origin": "http://evil.example:" + port, "Host": "evil.example:" + port}, 403, "Origin header"},
		{"a rebound name reading the journal", "GET", "/api/v1/tasks", "", map[string]string{"Host": "evil.example:" + port}, 403, `host name "evil.example"`},
		{"a page's cancel", "POST", "/api/v1/tasks/t1/cancel", "{}", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site cross-site"},
		{"a page's read", "GET", "/api/v1/tasks", "", map[string]string{"Sec-Fetch-Site": "same-origin"}, 403, "Sec-Fetch-Site same-origin"},
		{"the address typed into a browser", "GET", "/api/v1/queue/status", "", map[string]string{"Sec-Fetch-Site": "none"}, 200, ""},
		{"curl by localhost", "GET", "/api/v1/tasks", "", map[string]string{"Host": "localhost:" + port}, 200, ""},
		{"curl by IPv6 loopback", "GET", "/api/v1/tasks", "", map[string]string{"Host": "[::1]:" + port}, 200, ""},
		{"curl by address", "POST", "/api/v1/tasks", `{"name":"x","command":"echo"}`, nil, 200, ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if h := tc.header["Host"]; h != "" {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == 403 && (got["code"] != float64(30005) || !strings.Contains(got["message"].(string), tc.says))) {
			t.Errorf("%s: %d %v, want %d saying %q", tc.name, resp.StatusCode, got, tc.want, tc.says)
		}
	}
	if f.submitted != 1 {
		t.Errorf("%d tasks submitted, want only curl's", f.submitted)
	}

	// Served on a network address, the API is named by its node's name
	// (the Slurm backend's placement); browsers are still refused. (Tests
	// listen on loopback only: the request is made with the address it
	// would have come in on.)
	on := func(addr string, header ...string) string {
		r := httptest.NewRequest("GET", "http://node-b:7071/api/v1/queue/status", nil)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP(addr), Port: 7071}))
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return fromBrowser(r)
	}
	if why := on("10.0.0.12"); why != "" {
		t.Errorf("the API on 10.0.0.12 refuses its node's name: %s", why)
	}
	if why := on("10.0.0.12", "Origin", "http://evil.example"); !strings.Contains(why, "Origin header") {
		t.Errorf("the API on 10.0.0.12 takes a page's request: %q", why)
	}
	if why := on("127.0.0.1"); !strings.Contains(why, `host name "node-b"`) {
		t.Errorf("the API on loopback takes a host name: %q", why)
	}
}

// The sandbox's user is refused, whatever it asks, and changes nothing;
// the agent's own user (and root, who runs the test) is answered. Which
// user made the connection is read from the kernel's socket table, here a
// copy of it written by the test (peercred reads the real one in its own
// tests).
func TestSandboxUserIsRefused(t *testing.T) {
	f := &fake{tasks: []journal.Task{{ID: "t1", Name: "one", Status: journal.StatusRunning}}}
	proc := t.TempDir()
	if err := os.Mkdir(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := Handler(context.Background(), NewServer(f, f), Options{RefusedUIDs: []uint32{65534}, Proc: proc})
	server := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7071}
	call := func(uid int, listed bool, method, path, body string) (int, map[string]any) {
		client := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000 + uid%1000}
		table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
		if listed {
			table += fmt.Sprintf("   0: %s %s 01 00000000:00000000 00:00000000 00000000 %5d        0 1 1 0 20 4 30 10 -1\n",
				procAddr(client), procAddr(server), uid)
		}
		if err := os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(method, "http://127.0.0.1:7071"+path, strings.NewReader(body))
		r.RemoteAddr = client.String()
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, server))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var got map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &got)
		return w.Code, got
	}
	for _, tc := range []struct {
		name               string
		uid                int
		listed             bool
		method, path, body string
		want               int
		says               string
	}{
		{"a sandboxed task listing the journal", 65534, true, "GET", "/api/v1/tasks", "", 403, "user 65534 (the sandbox's) is refused"},
		{"a sandboxed task cancelling another", 65534, true, "POST", "/api/v1/tasks/t1/cancel", "{}", 403, "does not answer sandboxed tasks"},
		{"a sandboxed task creating one", 65534, true, "POST", "/api/v1/tasks", `{"name":"x","command":"echo"}`, 403, "sandbox"},
		{"a caller whose socket is not listed", 1000, false, "GET", "/api/v1/tasks", "", 403, "could not be told"},
		{"the agent's user", 0, true, "GET", "/api/v1/tasks", "", 200, ""},
		{"another user of the machine", 1000, true, "POST", "/api/v1/tasks", `{"name":"x","command":"echo"}`, 200, ""},
	} {
		code, got := call(tc.uid, tc.listed, tc.method, tc.path, tc.body)
		if code != tc.want || (tc.want == 403 && (got["code"] != float64(30005) || !strings.Contains(fmt.Sprint(got["message"]), tc.says))) {
			t.Errorf("%s: %d %v, want %d saying %q", tc.name, code, got, tc.want, tc.says)
		}
	}
	if f.submitted != 1 {
		t.Errorf("%d tasks submitted, want only the other user's", f.submitted)
	}
}

// procAddr writes a as /proc/net/tcp lists an IPv4 address: its 32-bit
// word little-endian in hex, then the port.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
}
