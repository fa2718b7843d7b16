package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// liveWorld is a real scheduler and a real gateway, each restartable on
// its own, over one Postgres database and one embedded broker; agents are
// driven by hand through the REST lease API, so each step of a task is a
// known event.
type liveWorld struct {
	t         *testing.T
	db        *pgtest.DB
	broker    *kafkatest.Broker
	schedAddr string
	gwPool    *pgxpool.Pool
	gw        *gateway.Gateway
	stopGW    func()
	// url is the gateway clients stream from; agentURL another replica,
	// which agents call (it stays up when the first restarts).
	url, agentURL string
	// keyA and keyB are API keys of tenants "acme" and "other"; agent
	// is a shared-pool agent token of agent "agent-1".
	keyA, keyB, agent string
}

const liveInternalToken = "live-internal-token-0123456789abcdef"

func newLiveWorld(t *testing.T) *liveWorld {
	t.Helper()
	ctx := context.Background()
	w := &liveWorld{t: t, db: pgtest.New(t), broker: kafkatest.New(t, kafkatest.WithPartitions(4))}
	open := func(schema string, sets ...pg.MigrationSet) *pgxpool.Pool {
		pool, err := pg.Open(ctx, pg.Config{URL: w.db.URL, Schema: schema, MaxConns: 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if err := pg.Migrate(ctx, pool, schema, sets...); err != nil {
			t.Fatal(err)
		}
		return pool
	}
	svc, err := scheduler.New(scheduler.Config{DB: open(scheduler.Schema, scheduler.Migrations()...), Kafka: w.broker.Config(),
		Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: liveInternalToken})
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.schedAddr = lis.Addr().String()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis) }()
	go func() { defer close(done); _ = svc.Run(runCtx) }()
	t.Cleanup(func() { cancel(); srv.Stop(); <-done })

	w.gwPool = open("gateway", gateway.Migrations()...)
	var agentGW *gateway.Gateway
	agentGW, _ = w.runGateway()
	w.agentURL = "http://" + agentGW.HTTPAddr()
	w.startGateway()
	creds := w.gw.Credentials()
	for _, tenant := range []string{"acme", "other"} {
		if _, err := creds.CreateTenant(ctx, tenant, tenant, gateway.TierStandard); err != nil {
			t.Fatal(err)
		}
	}
	if _, w.keyA, err = creds.CreateAPIKey(ctx, "acme", "live", nil); err != nil {
		t.Fatal(err)
	}
	if _, w.keyB, err = creds.CreateAPIKey(ctx, "other", "live", nil); err != nil {
		t.Fatal(err)
	}
	if _, w.agent, err = creds.CreateAgentToken(ctx, "agent-1", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// startGateway starts a gateway (a new one after stopGateway: a new
// consumer of the task topic, on a new port) and waits until it tails the
// topic.
func (w *liveWorld) startGateway() {
	w.t.Helper()
	gw, stop := w.runGateway()
	w.gw, w.url, w.stopGW = gw, "http://"+gw.HTTPAddr(), stop
}

func (w *liveWorld) stopGateway() { w.stopGW() }

// runGateway starts a gateway replica and waits until it tails the task
// topic.
func (w *liveWorld) runGateway() (*gateway.Gateway, func()) {
	w.t.Helper()
	gw, err := gateway.New(context.Background(), gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		SchedulerTarget: w.schedAddr, InternalToken: liveInternalToken, DB: w.gwPool,
		Live: gateway.LiveConfig{Kafka: w.broker.Config(), KeepAlive: 200 * time.Millisecond}})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	var once bool
	stop := func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("gateway Run: %v", err)
		}
	}
	w.t.Cleanup(stop)
	waitFor(w.t, 20*time.Second, "the gateway to tail the task topic", gw.LiveReady)
	return gw, stop
}

// call sends a REST request and decodes the JSON answer.
func (w *liveWorld) call(method, path, bearer string, body any) (int, map[string]any) {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = strings.NewReader(string(raw))
	}
	base := w.url
	if strings.HasPrefix(path, "/api/v1/agent/") {
		base = w.agentURL
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 && json.Unmarshal(raw, &out) != nil {
		out["_raw"] = string(raw)
	}
	return resp.StatusCode, out
}

// must calls and fails the test unless the answer is 200.
func (w *liveWorld) must(method, path, bearer string, body any) map[string]any {
	w.t.Helper()
	code, out := w.call(method, path, bearer, body)
	if code != http.StatusOK {
		w.t.Fatalf("%s %s: %d %v", method, path, code, out)
	}
	return out
}

func (w *liveWorld) submit(key, name string) string {
	w.t.Helper()
	return w.must("POST", "/api/v1/tasks", key, map[string]any{"name": name, "type": "shell", "command": "true"})["id"].(string)
}

// claim leases the one pending task to agent-1 and returns its attempt id.
func (w *liveWorld) claim(id string) string {
	w.t.Helper()
	out := w.must("POST", "/api/v1/agent/tasks/claim", w.agent, map[string]any{"agent_id": "agent-1", "limit": 1})
	tasks, _ := out["tasks"].([]any)
	if len(tasks) != 1 || tasks[0].(map[string]any)["id"] != id {
		w.t.Fatalf("claim = %v, want task %s", out, id)
	}
	return tasks[0].(map[string]any)["attempt_id"].(string)
}

func (w *liveWorld) agentCall(id, attempt, what string, extra map[string]any) {
	w.t.Helper()
	body := map[string]any{"agent_id": "agent-1", "attempt_id": attempt}
	for k, v := range extra {
		body[k] = v
	}
	w.must("POST", "/api/v1/agent/tasks/"+id+"/"+what, w.agent, body)
}

func (w *liveWorld) start(id, attempt string) { w.agentCall(id, attempt, "start", nil) }
func (w *liveWorld) progress(id, attempt string, p int, msg string) {
	w.agentCall(id, attempt, "progress", map[string]any{"progress": p, "message": msg})
}
func (w *liveWorld) complete(id, attempt string) {
	w.agentCall(id, attempt, "complete", map[string]any{"exit_code": 0, "stdout": "done\n"})
}

// frame is one received live frame, from SSE or a WebSocket.
type frame struct {
	ID    int64
	Event string
	Data  map[string]any
}

func (f frame) status() string { s, _ := f.Data["status"].(string); return s }
func (f frame) final() bool    { b, _ := f.Data["final"].(bool); return b }

// sseClient reads one SSE response frame by frame.
type sseClient struct {
	t      *testing.T
	resp   *http.Response
	frames chan frame
	// closeEvent is the data of an "event: close" frame, if one came.
	closeEvent chan map[string]any
	done       chan struct{}
	// seen holds every frame next returned, in order.
	seen []frame
}

// openSSE connects to the task's event stream. lastID < 0 sends no
// Last-Event-ID.
func (w *liveWorld) openSSE(key, id string, lastID int64, query string) (*http.Response, *sseClient) {
	w.t.Helper()
	return w.openSSEAt(w.url, key, id, lastID, query)
}

// openSSEAt is openSSE on the gateway at base.
func (w *liveWorld) openSSEAt(base, key, id string, lastID int64, query string) (*http.Response, *sseClient) {
	w.t.Helper()
	req, err := http.NewRequest("GET", base+"/api/v1/tasks/"+id+"/events"+query, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if lastID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	c := &sseClient{t: w.t, resp: resp, frames: make(chan frame, 100), closeEvent: make(chan map[string]any, 1),
		done: make(chan struct{})}
	w.t.Cleanup(func() { resp.Body.Close() })
	go c.read()
	return resp, c
}

func (c *sseClient) read() {
	defer close(c.done)
	defer close(c.frames)
	rd := bufio.NewReader(c.resp.Body)
	var f frame
	var event string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if event == "close" {
				c.closeEvent <- f.Data
			} else if event != "" {
				f.Event = event
				c.frames <- f
			}
			f, event = frame{}, ""
		case strings.HasPrefix(line, ":"): // keep-alive
		case strings.HasPrefix(line, "id: "):
			f.ID, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &f.Data); err != nil {
				c.t.Errorf("frame data is not JSON: %q", line)
			}
		}
	}
}

// next returns the next frame; ok false when the stream ended.
func (c *sseClient) next(d time.Duration) (frame, bool) {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if ok {
			c.seen = append(c.seen, f)
		}
		return f, ok
	case <-time.After(d):
		c.t.Fatalf("no SSE frame within %s", d)
		return frame{}, false
	}
}

// until reads frames until one has status and returns it.
func (c *sseClient) until(status string) frame {
	c.t.Helper()
	for {
		f, ok := c.next(10 * time.Second)
		if !ok {
			c.t.Fatalf("stream ended before status %s; got %v", status, statuses(c.seen))
		}
		if f.status() == status {
			return f
		}
	}
}

// drain reads frames until the stream ends.
func (c *sseClient) drain() {
	c.t.Helper()
	for {
		if _, ok := c.next(10 * time.Second); !ok {
			return
		}
	}
}

// wsClient reads a WebSocket stream.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
}

func (w *liveWorld) openWS(key, id, query string) (*wsClient, *http.Response, error) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.url, "http")+"/api/v1/tasks/"+id+"/ws"+query,
		&websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	w.t.Cleanup(func() { conn.CloseNow() })
	return &wsClient{t: w.t, conn: conn}, resp, nil
}

// next returns the next frame, or the close status once the server closed.
func (c *wsClient) next(d time.Duration) (frame, websocket.StatusCode) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	typ, raw, err := c.conn.Read(ctx)
	if err != nil {
		if code := websocket.CloseStatus(err); code != -1 {
			return frame{}, code
		}
		c.t.Fatalf("websocket read: %v", err)
	}
	if typ != websocket.MessageText {
		c.t.Fatalf("message type %v, want text", typ)
	}
	var f frame
	if err := json.Unmarshal(raw, &f); err != nil {
		c.t.Fatalf("message is not a frame: %s", raw)
	}
	return f, -1
}

// all reads frames until the server closes, returning them and the status.
func (c *wsClient) all() ([]frame, websocket.StatusCode) {
	c.t.Helper()
	var got []frame
	for {
		f, code := c.next(10 * time.Second)
		if code != -1 {
			return got, code
		}
		got = append(got, f)
	}
}

// checkOrder checks frame ids strictly increase above after.
func checkOrder(t *testing.T, after int64, frames []frame) {
	t.Helper()
	for _, f := range frames {
		if f.ID <= after {
			t.Errorf("frame id %d not above %d: %v", f.ID, after, frames)
		}
		if int64(f.Data["version"].(float64)) != f.ID {
			t.Errorf("frame id %d, data version %v", f.ID, f.Data["version"])
		}
		after = f.ID
	}
}

// statuses lists "event:status" of frames.
func statuses(frames []frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Event+":"+f.status())
	}
	return out
}

func errorCode(body map[string]any) int {
	c, _ := body["code"].(float64)
	return int(c)
}

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
