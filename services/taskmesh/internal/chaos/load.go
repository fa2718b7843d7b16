package chaos

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"mime/multipart"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// request is one piece of work the load asked for, under its idempotency
// key: retried with the same key until a front door accepts it.
type request struct {
	key   string // request_id
	kind  string // e.g. "true", "sleep", "false", "timeout", "stubborn", "gpu", "gpu-queue", "quota", "grpc", "dag", "pipeline"
	group bool   // a task group, not a task
	quota bool   // a change of the chaos-gpu ClusterQueue's quota, no work
	job   bool   // a conversion job (POST /jobs), not a task
	video bool   // a video generation (POST /v1/video/generations): a task
	id    string // the task, group or job id once accepted ("quota" for a quota change)
}

// serverError is one 5xx answer (REST) or Unavailable/Internal status
// (gRPC) a client got.
type serverError struct {
	at     time.Time
	via    string // the front door
	path   string // the REST route's path ("" for gRPC)
	status int    // HTTP status; for gRPC the HTTP status its code maps to
	code   string // the envelope's business code or the gRPC code
	body   string
}

// load submits a steady mix of work through both gateways' REST and gRPC
// front doors.
type load struct {
	d    *deployment
	rate int
	mix  *rand.Rand // the mix of kinds; its own seed, so the faults' schedule does not depend on it
	http *http.Client
	rpc  []taskv1.TaskServiceClient
	// witness is the stubborn tasks' command and args: the deployment's
	// own taskmesh binary by its absolute path, as `chaos witness` (a
	// shell task runs its command directly, no shell in between).
	witness []string

	mu       sync.Mutex
	requests []*request
	errors   []serverError
	rejected []string // requests refused with a 4xx: a defect of the load or of the edge
	next     atomic.Int64
	inflight sync.WaitGroup
	// inputs are the upload keys (model, quant) every conversion job
	// uses, uploaded by the first one that needs them (under mu).
	inputs []string
}

func newLoad(d *deployment, rate int, seed int64) (*load, error) {
	// The binary as the agents must name it: they start a task in its
	// own work directory, with their own PATH.
	bin, err := exec.LookPath(d.cfg.Binary)
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("the taskmesh binary for the stubborn tasks: %w", err)
	}
	l := &load{d: d, rate: rate, mix: rand.New(rand.NewSource(seed)), http: &http.Client{Timeout: 15 * time.Second},
		witness: witnessCommand(bin, d.witnessDir, witnessHold)}
	for _, addr := range d.gatewayRPC {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		l.rpc = append(l.rpc, taskv1.NewTaskServiceClient(conn))
	}
	return l, nil
}

// run submits rate requests a second until ctx ends; each request keeps
// being retried until it is accepted or until retryCtx ends. It returns
// how many it made.
//
// The schedule is open-loop: request n is due n/rate after the start, and
// a driver that fell behind (a busy machine delays its wake-ups) makes
// the due ones at once. A ticker alone drops the ticks it misses, and the
// run then offered less than its rate without saying so. Only the cap on
// requests in flight holds the load back, and then the printed rate shows
// it.
func (l *load) run(ctx, retryCtx context.Context) int {
	tick := time.NewTicker(min(time.Second/time.Duration(l.rate), 10*time.Millisecond))
	defer tick.Stop()
	sem := make(chan struct{}, 256)
	start, made := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			l.inflight.Wait()
			return made
		case <-tick.C:
		}
		for due := dueRequests(time.Since(start), l.rate); made < due; made++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				l.inflight.Wait()
				return made // the load ended while waiting: this request was never made
			}
			r := l.newRequest() // recorded only once it will be sent
			l.inflight.Add(1)
			go func() {
				defer func() { <-sem; l.inflight.Done() }()
				l.submit(retryCtx, r)
			}()
		}
	}
}

// dueRequests is how many requests an open-loop load at rate a second has
// made elapsed after its start: the first at the start, the next 1/rate
// later.
func dueRequests(elapsed time.Duration, rate int) int {
	return int(elapsed*time.Duration(rate)/time.Second) + 1
}

// kinds of work and their weights out of 100.
var kinds = []struct {
	name   string
	weight int
}{{"true", 33}, {"sleep", 20}, {"false", 10}, {"timeout", 5}, {"stubborn", 3}, {"gpu", 3}, {"gpu-queue", 2}, {"quota", 1}, {"grpc", 18}, {"dag", 2},
	{"pipeline", 2}, {"video", 1}}

// boundedRates bounds the arrival of work that small queues serve, in
// requests a second, whatever the load's rate. Each GPU task holds its GPU
// for its second of sleep plus the hand-offs around it (admission, claim,
// start, completion, release), and the queues are small on purpose:
// chaos-gpu's quota goes down to one GPU, the standard tier's default
// queue has two. A conversion job passes through the BIE stage's queue,
// whose cap is two; a video generation renders an MP4 with ffmpeg, seconds
// of CPU on a small machine. At 2% and 3% of a high rate the work would arrive
// faster than those queues can ever serve it, and the backlog left at the
// end of the drain would count as lost work that no fault caused. Below
// the bounds (up to 15 and 16 requests a second for GPU work) the mix is
// exactly the table's.
//
// A stubborn task holds an agent's slot for the witness's whole hold, so
// it is bounded at 1 a second: rate × hold is then at most 8 of the 48
// slots, beside the 30 or so the rest of the load holds, while an agent
// stopped or cut off takes its 16 away for a while.
var boundedRates = map[string]float64{"gpu": 0.5, "gpu-queue": 0.3, "pipeline": 0.3, "video": 0.1, "stubborn": 1}

func (l *load) newRequest() *request {
	n := l.next.Add(1)
	w := l.mix.Intn(100)
	kind := kinds[0].name
	for _, k := range kinds {
		if w < k.weight {
			kind = k.name
			if bound, ok := boundedRates[kind]; ok {
				// Above its bound, a bounded request is kept with the
				// probability that brings its rate down to the bound and
				// is a /bin/true task otherwise.
				if rate := float64(l.rate) * float64(k.weight) / 100; rate > bound && l.mix.Float64() >= bound/rate {
					kind = kinds[0].name
				}
			}
			break
		}
		w -= k.weight
	}
	r := &request{key: fmt.Sprintf("chaos-%d-%s", n, kind), kind: kind, group: kind == "dag", quota: kind == "quota",
		job: kind == "pipeline", video: kind == "video"}
	l.mu.Lock()
	l.requests = append(l.requests, r)
	l.mu.Unlock()
	return r
}

// spec is the task a kind of request submits: retries without delay, a
// timeout, and a short lease so a lost attempt is noticed quickly.
// witness is the command line of the stubborn kind's process.
func spec(kind string, n int, witness []string) map[string]any {
	s := map[string]any{"name": "chaos " + kind, "type": "shell", "retry_delay": 1, "max_retries": 3, "timeout": 60}
	switch kind {
	case "true", "grpc":
		s["command"] = "/bin/true"
	case "sleep":
		s["command"], s["args"] = "sleep", []string{fmt.Sprint(1 + n%2)}
	case "false":
		s["command"], s["max_retries"] = "false", 1 // fails for good after one retry
	case "timeout":
		s["command"], s["args"], s["timeout"], s["max_retries"] = "sleep", []string{"30"}, 2, 0
	case "stubborn":
		// The witness (witness.go): ignores SIGTERM and holds its task's
		// lock for witnessHold, so a run the server gave up on while
		// its process lived on meets the next run of the task there. It
		// keeps the default grace period, as a task that ignores SIGTERM
		// would; retried like the other kinds, a run killed by a fault
		// may fail it for good after its retries, which the lost
		// invariant accepts (failed is final).
		s["command"], s["args"] = witness[0], witness[1:]
	case "gpu":
		// Waits for admission in its tier's default queue.
		s["command"], s["args"], s["resources"] = "sleep", []string{"1"}, map[string]string{"nvidia.com/gpu": "1"}
	case "gpu-queue":
		// Waits in the queue whose quota the load changes.
		s["command"], s["args"], s["resources"], s["queue"] = "sleep", []string{"1"}, map[string]string{"nvidia.com/gpu": "1"}, chaosQueue
	}
	return s
}

func (l *load) submit(ctx context.Context, r *request) {
	for attempt := 0; ; attempt++ {
		gw := attempt % len(l.d.gatewayURL)
		var (
			id   string
			done bool
		)
		if r.kind == "grpc" {
			id, done = l.submitGRPC(ctx, gw, r)
		} else {
			id, done = l.submitREST(ctx, gw, r)
		}
		if done {
			l.mu.Lock()
			r.id = id
			l.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(attempt)):
		}
	}
}

func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 4)
	return d
}

// submitREST posts r to gateway gw; done is true once r is settled
// (accepted, or refused with a 4xx, which retrying would not change).
func (l *load) submitREST(ctx context.Context, gw int, r *request) (string, bool) {
	method, path, key := http.MethodPost, "/api/v1/tasks?request_id="+r.key, l.d.apiKey
	body := spec(r.kind, int(l.next.Load()), l.witness)
	switch {
	case r.group:
		path = "/api/v1/task-groups"
		body = dagGroup(r.key)
	case r.quota:
		// Between 1 and 3 GPUs; a PUT is idempotent by itself.
		method, path, key = http.MethodPut, "/api/v1/cluster-queues/"+chaosQueue, l.d.adminKey
		body = chaosQueueSpec(1 + int(l.next.Load()%3))
	case r.job:
		// POST /jobs takes no idempotency key: an answer lost on the way
		// leaves a job nobody counts, which runs and ends like the others.
		inputs, ok := l.pipelineInputs(ctx, gw)
		if !ok {
			return "", false
		}
		path, body = "/jobs", map[string]any{"model_key": inputs[0], "quant_key": inputs[1]}
	case r.video:
		// Takes no idempotency key either; a text_to_video at the smallest
		// size, rendered by an agent's ffmpeg and uploaded as its result.
		path = "/v1/video/generations"
		body = map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "chaos " + r.key},
			"parameters": map[string]any{"resolution": "480P", "prompt_extend": false}}
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, l.d.gatewayURL[gw]+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.http.Do(req)
	if err != nil {
		return "", false // the gateway is down or the answer was lost: retry, the key makes it safe
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode/100 == 2 && r.quota:
		return "quota", true
	case resp.StatusCode/100 == 2:
		var out struct {
			ID     string `json:"id"`
			JobID  string `json:"job_id"`
			Output struct {
				TaskID string `json:"task_id"`
			} `json:"output"`
		}
		id := ""
		if err := json.Unmarshal(raw, &out); err == nil {
			id = out.ID + out.JobID + out.Output.TaskID
		}
		if id == "" {
			l.reject(r, fmt.Sprintf("%d without an id: %s", resp.StatusCode, raw))
			return "", true
		}
		return id, true
	case resp.StatusCode >= 500:
		var env struct {
			Code json.RawMessage `json:"code"`
		}
		_ = json.Unmarshal(raw, &env)
		l.serverError(serverError{at: time.Now(), via: l.d.gatewayURL[gw], path: path, status: resp.StatusCode, code: string(env.Code), body: string(raw)})
		return "", false
	case resp.StatusCode == http.StatusTooManyRequests:
		return "", false
	}
	l.reject(r, fmt.Sprintf("%d: %s", resp.StatusCode, raw))
	return "", true
}

// pipelineInputs returns the upload keys of the conversion jobs' model and
// quantisation files, uploading both through gateway gw the first time;
// false while an upload fails (the job's request is retried).
func (l *load) pipelineInputs(ctx context.Context, gw int) ([]string, bool) {
	l.mu.Lock()
	inputs := l.inputs
	l.mu.Unlock()
	if inputs != nil {
		return inputs, true
	}
	model, ok := l.upload(ctx, gw, "model", onnxModel())
	if !ok {
		return nil, false
	}
	quant, ok := l.upload(ctx, gw, "quant", quantArchive())
	if !ok {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inputs == nil {
		l.inputs = []string{model, quant}
	}
	return l.inputs, true
}

// upload posts one input file to POST /jobs/uploads; a 5xx is recorded
// like any other.
func (l *load) upload(ctx context.Context, gw int, kind string, data []byte) (string, bool) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("kind", kind)
	fw, _ := mw.CreateFormFile("file", kind)
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.d.gatewayURL[gw]+"/jobs/uploads", &body)
	req.Header.Set("Authorization", "Bearer "+l.d.apiKey)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := l.http.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var out struct {
		Key string `json:"key"`
	}
	if resp.StatusCode >= 500 {
		var env struct {
			Code json.RawMessage `json:"code"`
		}
		_ = json.Unmarshal(raw, &env)
		l.serverError(serverError{at: time.Now(), via: l.d.gatewayURL[gw], path: "/jobs/uploads", status: resp.StatusCode,
			code: string(env.Code), body: string(raw)})
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(raw, &out) != nil || out.Key == "" {
		return "", false
	}
	return out.Key, true
}

// onnxModel is the smallest ModelProto the ONNX stage accepts: ir_version
// 8 and an empty graph.
func onnxModel() []byte { return []byte("\x08\x08\x3a\x00") }

// quantArchive is a zip of one calibration file.
func quantArchive() []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.Create("calibration.txt")
	_, _ = w.Write([]byte("chaos\n"))
	_ = zw.Close()
	return b.Bytes()
}

// dagGroup is a diamond: a, then b and c, then d.
func dagGroup(key string) map[string]any {
	member := func(id string, deps ...string) map[string]any {
		m := map[string]any{"id": id, "name": id, "type": "shell", "command": "/bin/true", "retry_delay": 1, "max_retries": 3}
		if len(deps) > 0 {
			m["depends_on"] = deps
		}
		return m
	}
	return map[string]any{"name": "chaos dag", "mode": "dag", "request_id": key, "start": true,
		"tasks": []any{member("a"), member("b", "a"), member("c", "a"), member("d", "b", "c")}}
}

func (l *load) submitGRPC(ctx context.Context, gw int, r *request) (string, bool) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+l.d.apiKey)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	retries, delay := int32(3), int32(1)
	resp, err := l.rpc[gw].CreateTask(cctx, &taskv1.CreateTaskRequest{RequestId: r.key,
		Spec: &taskv1.TaskSpec{Name: "chaos grpc", Type: "shell", Command: "/bin/true", MaxRetries: &retries, RetryDelay: &delay}})
	if err == nil {
		return resp.GetTask().GetId(), true
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		// Documented as 503; a gateway that is down looks the same to
		// the client, and its outage is a window too.
		l.serverError(serverError{at: time.Now(), via: l.d.gatewayRPC[gw], status: http.StatusServiceUnavailable, code: "grpc " + st.Code().String(), body: st.Message()})
		return "", false
	case codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		return "", false
	case codes.Internal, codes.Unknown:
		l.serverError(serverError{at: time.Now(), via: l.d.gatewayRPC[gw], status: http.StatusInternalServerError, code: "grpc " + st.Code().String(), body: st.Message()})
		return "", false
	}
	l.reject(r, st.Code().String()+": "+st.Message())
	return "", true
}

func (l *load) serverError(e serverError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, e)
}

func (l *load) reject(r *request, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected = append(l.rejected, r.key+" "+why)
}

// snapshot returns the requests and errors so far.
func (l *load) snapshot() ([]request, []serverError, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := make([]request, len(l.requests))
	for i, r := range l.requests {
		rs[i] = *r
	}
	return rs, append([]serverError(nil), l.errors...), append([]string(nil), l.rejected...)
}
