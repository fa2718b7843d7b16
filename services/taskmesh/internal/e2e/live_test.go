package e2e

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// lifecycle is what a client watching from submission sees.
var lifecycle = []string{"status:pending", "status:assigned", "status:running", "progress:running", "status:completed"}

// checkFinal checks the last frame is the final state and agrees with what
// polling GET answers.
func checkFinal(t *testing.T, w *liveWorld, id string, frames []frame) {
	t.Helper()
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	last := frames[len(frames)-1]
	for _, f := range frames[:len(frames)-1] {
		if f.final() {
			t.Errorf("frame %d is final but not last", f.ID)
		}
	}
	task := w.must("GET", "/api/v1/tasks/"+id, w.keyA, nil)
	if !last.final() || last.status() != task["status"] || last.Data["progress"] != task["progress"] ||
		last.Data["exit_code"] != task["exit_code"] || last.Data["attempt_id"] != task["attempt_id"] ||
		last.Data["ended_at"] != task["ended_at"] || last.Data["started_at"] != task["started_at"] ||
		last.Data["created_at"] != task["created_at"] || last.Data["updated_at"] != task["updated_at"] {
		t.Errorf("final frame %v\ndisagrees with GET %v", last.Data, task)
	}
	if v, _ := task["version"].(float64); last.ID != int64(v) {
		t.Errorf("final frame id %d, task version %v", last.ID, task["version"])
	}
}

// A client following a task over SSE sees every step, driven by real lease
// calls, in order, with the task's own fields; the stream ends after the
// final state. A client of another gateway replica, which tails the topic
// on its own, sees the same.
func TestLiveSSEFollowsTheTaskToItsEnd(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t)
	id := w.submit(w.keyA, "watched")
	resp, c := w.openSSE(w.keyA, id, -1, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("open: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	_, other := w.openSSEAt(w.agentURL, w.keyA, id, -1, "")
	if f := c.until("pending"); f.Data["change"] != "snapshot" || f.Data["task_id"] != id || f.ID != 1 {
		t.Fatalf("first frame = %+v", f)
	}
	attempt := w.claim(id)
	c.until("assigned")
	w.start(id, attempt)
	c.until("running")
	w.progress(id, attempt, 40, "half way")
	w.complete(id, attempt)
	c.drain()
	if got := statuses(c.seen); !slices.Equal(got, lifecycle) {
		t.Fatalf("frames = %v, want %v", got, lifecycle)
	}
	checkOrder(t, 0, c.seen)
	if p := c.seen[3].Data; p["progress"] != float64(40) || p["progress_message"] != "half way" || p["change"] != "progressed" {
		t.Errorf("progress frame = %v", p)
	}
	if c.seen[1].Data["assigned_agent_id"] != "agent-1" || c.seen[1].Data["attempt_id"] != attempt {
		t.Errorf("assigned frame = %v", c.seen[1].Data)
	}
	checkFinal(t, w, id, c.seen)
	other.drain()
	if got := statuses(other.seen); !slices.Equal(got, lifecycle) {
		t.Errorf("frames from the other replica = %v, want %v", got, lifecycle)
	}
	for i := range other.seen {
		if other.seen[i].ID != c.seen[i].ID || other.seen[i].Data["updated_at"] != c.seen[i].Data["updated_at"] {
			t.Errorf("frame %d differs between replicas: %v / %v", i, other.seen[i].Data, c.seen[i].Data)
		}
	}
}

// The same over a WebSocket: JSON messages {id, event, data}, closed with
// 1000 after the final state.
func TestLiveWebSocketFollowsTheTaskToItsEnd(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t)
	id := w.submit(w.keyA, "watched")
	c, _, err := w.openWS(w.keyA, id, "")
	if err != nil {
		t.Fatal(err)
	}
	var frames []frame
	read := func(status string) {
		t.Helper()
		for {
			f, code := c.next(10 * time.Second)
			if code != -1 {
				t.Fatalf("closed %v before %s; frames %v", code, status, statuses(frames))
			}
			frames = append(frames, f)
			if f.status() == status {
				return
			}
		}
	}
	read("pending")
	attempt := w.claim(id)
	read("assigned")
	w.start(id, attempt)
	read("running")
	w.progress(id, attempt, 40, "half way")
	w.complete(id, attempt)
	rest, code := c.all()
	frames = append(frames, rest...)
	if code != websocket.StatusNormalClosure {
		t.Errorf("close status %v, want 1000", code)
	}
	if got := statuses(frames); !slices.Equal(got, lifecycle) {
		t.Fatalf("frames = %v, want %v", got, lifecycle)
	}
	checkOrder(t, 0, frames)
	checkFinal(t, w, id, frames)
}

// A client that disconnects in the middle resumes from its last id: over
// SSE with Last-Event-ID, over a WebSocket with after_version. What
// happened while it was away arrives as the task's current state, then the
// stream goes on; a task that finished meanwhile gets its final frame, and
// a client that has it already gets nothing more.
func TestLiveResumeNeverMissesTheFinalState(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t)

	// SSE: away between assigned and running + progress.
	id := w.submit(w.keyA, "resumed over sse")
	_, c := w.openSSE(w.keyA, id, -1, "")
	attempt := w.claim(id)
	assigned := c.until("assigned")
	c.resp.Body.Close()
	w.start(id, attempt)
	w.progress(id, attempt, 70, "most of it")
	_, c2 := w.openSSE(w.keyA, id, assigned.ID, "")
	snap, _ := c2.next(10 * time.Second)
	if snap.Data["change"] != "snapshot" || snap.status() != "running" || snap.Data["progress"] != float64(70) ||
		snap.Data["progress_message"] != "most of it" {
		t.Fatalf("first frame after resuming = %+v", snap)
	}
	w.complete(id, attempt)
	c2.drain()
	checkOrder(t, assigned.ID, c2.seen)
	checkFinal(t, w, id, c2.seen)

	// WebSocket: away from running to the end.
	id = w.submit(w.keyA, "resumed over websocket")
	ws, _, err := w.openWS(w.keyA, id, "")
	if err != nil {
		t.Fatal(err)
	}
	attempt = w.claim(id)
	w.start(id, attempt)
	var running frame
	for running.status() != "running" {
		f, code := ws.next(10 * time.Second)
		if code != -1 {
			t.Fatalf("closed %v", code)
		}
		running = f
	}
	ws.conn.CloseNow()
	w.progress(id, attempt, 90, "")
	w.complete(id, attempt)
	ws2, _, err := w.openWS(w.keyA, id, "?after_version="+strconv.FormatInt(running.ID, 10))
	if err != nil {
		t.Fatal(err)
	}
	frames, code := ws2.all()
	if code != websocket.StatusNormalClosure || len(frames) != 1 || frames[0].status() != "completed" ||
		frames[0].Data["change"] != "snapshot" {
		t.Fatalf("after finishing while away: %v %v", code, frames)
	}
	checkFinal(t, w, id, frames)
	final := frames[0].ID

	// A client with the final state gets nothing more: 204 over SSE (which
	// stops EventSource), an immediate 1000 over a WebSocket.
	resp, _ := w.openSSE(w.keyA, id, final, "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("SSE with the final id: %d, want 204", resp.StatusCode)
	}
	ws3, _, err := w.openWS(w.keyA, id, "?after_version="+strconv.FormatInt(final, 10))
	if err != nil {
		t.Fatal(err)
	}
	if frames, code := ws3.all(); len(frames) != 0 || code != websocket.StatusNormalClosure {
		t.Errorf("WebSocket with the final id: %v %v", frames, code)
	}
	// Without a resume point a finished task is one final frame.
	_, c3 := w.openSSE(w.keyA, id, -1, "")
	c3.drain()
	if len(c3.seen) != 1 || c3.seen[0].ID != final || !c3.seen[0].final() {
		t.Errorf("finished task from scratch: %v", statuses(c3.seen))
	}
}

// Another tenant's task is 404 (30004) on both routes and nothing is
// streamed; no credentials is 401; an agent token is 403; a bad resume
// point is 400 and a plain GET on the WebSocket route is 400.
func TestLiveStreamsAreTenantIsolated(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t)
	id := w.submit(w.keyA, "private")
	for _, tt := range []struct {
		name, key, path string
		status, code    int
		headers         map[string]string
	}{
		{"other tenant sse", w.keyB, "/events", 404, 30004, nil},
		{"other tenant ws", w.keyB, "/ws", 404, 30004, map[string]string{"Connection": "Upgrade", "Upgrade": "websocket",
			"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}},
		{"no credentials sse", "", "/events", 401, 0, nil},
		{"no credentials ws", "", "/ws", 401, 0, nil},
		{"agent token", w.agent, "/events", 403, 0, nil},
		{"bad resume point", w.keyA, "/events?after_version=soon", 400, 30005, nil},
		{"ws without upgrade", w.keyA, "/ws", 400, 30005, nil},
	} {
		req, _ := http.NewRequest("GET", w.url+"/api/v1/tasks/"+id+tt.path, nil)
		if tt.key != "" {
			req.Header.Set("Authorization", "Bearer "+tt.key)
		}
		for k, v := range tt.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = jsonDecode(resp, &body)
		if resp.StatusCode != tt.status || (tt.code != 0 && errorCode(body) != tt.code) || body["data"] != nil ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s %v", tt.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if _, resp, err := w.openWS(w.keyB, id, ""); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Errorf("other tenant's WebSocket: %v %v", resp, err)
	}
	if s := w.gw.LiveStats(); s.Streams != 0 || s.Frames != 0 || s.Subscribers != 0 {
		t.Errorf("refused requests streamed: %+v", s)
	}
}

// The gateway restarts while a client follows a task: the client is told
// (event close, reason shutdown), steps happen while no gateway runs, and
// the client reconnects to the new gateway — a new consumer of the topic
// that starts at its end — with its last id: it gets the state it missed,
// then the rest, then the final state.
func TestLiveResumeAcrossAGatewayRestart(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t)
	id := w.submit(w.keyA, "survives restarts")
	_, c := w.openSSE(w.keyA, id, -1, "")
	ws, _, err := w.openWS(w.keyA, id, "")
	if err != nil {
		t.Fatal(err)
	}
	attempt := w.claim(id)
	assigned := c.until("assigned")
	// The WebSocket client reads on (answering the close handshake) while
	// the gateway stops; it is closed with 1001: reconnect with
	// after_version.
	wsClosed := make(chan websocket.StatusCode, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			if _, _, err := ws.conn.Read(ctx); err != nil {
				wsClosed <- websocket.CloseStatus(err)
				return
			}
		}
	}()
	w.stopGateway()
	if code := <-wsClosed; code != websocket.StatusGoingAway {
		t.Errorf("WebSocket on shutdown closed with %v, want 1001", code)
	}
	select {
	case msg := <-c.closeEvent:
		if msg["reason"] != "shutdown" {
			t.Errorf("close event = %v", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no close event on shutdown")
	}
	w.start(id, attempt)
	w.progress(id, attempt, 55, "while the gateway was away")

	w.startGateway()
	_, resumed := w.openSSE(w.keyA, id, assigned.ID, "")
	_, fresh := w.openSSE(w.keyA, id, -1, "")
	for _, cl := range []*sseClient{resumed, fresh} {
		if f := cl.until("running"); f.Data["progress"] != float64(55) || f.Data["change"] != "snapshot" {
			t.Errorf("first frame on the new gateway = %v", f.Data)
		}
	}
	w.progress(id, attempt, 80, "")
	w.complete(id, attempt)
	for _, cl := range []*sseClient{resumed, fresh} {
		cl.drain()
		if got, want := statuses(cl.seen), []string{"status:running", "progress:running", "status:completed"}; !slices.Equal(got, want) {
			t.Errorf("frames on the new gateway = %v, want %v", got, want)
		}
		checkFinal(t, w, id, cl.seen)
	}
	checkOrder(t, assigned.ID, resumed.seen)
}

// A failed attempt with a retry left is followed by the retry (committed
// with the failure): the stream shows the failure, not as final, and goes
// on to the attempt that completes.
func TestLiveFailureWithARetryLeftIsNotTheEnd(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t)
	id := w.must("POST", "/api/v1/tasks", w.keyA, map[string]any{"name": "flaky", "type": "shell", "command": "true",
		"max_retries": 1, "retry_delay": 0})["id"].(string)
	_, c := w.openSSE(w.keyA, id, -1, "")
	c.until("pending")
	attempt := w.claim(id)
	w.start(id, attempt)
	w.agentCall(id, attempt, "complete", map[string]any{"exit_code": 3, "stderr": "flaked\n"})
	failed := c.until("failed")
	if failed.final() || failed.Data["change"] != "failed" || failed.Data["exit_code"] != float64(3) {
		t.Fatalf("failed frame = %v", failed.Data)
	}
	if f := c.until("pending"); f.Data["retry_count"] != float64(1) || f.Data["change"] != "retry_scheduled" {
		t.Fatalf("retry frame = %v", f.Data)
	}
	second := w.claim(id)
	w.start(id, second)
	w.complete(id, second)
	c.drain()
	want := []string{"status:pending", "status:assigned", "status:running", "status:failed", "status:pending",
		"status:assigned", "status:running", "status:completed"}
	if got := statuses(c.seen); !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
	checkOrder(t, 0, c.seen)
	checkFinal(t, w, id, c.seen)
}
