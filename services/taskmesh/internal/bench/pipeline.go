package bench

import (
	"archive/zip"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// PipelineOptions configures the pipeline benchmark.
type PipelineOptions struct {
	Common
	// Jobs per run (200).
	Jobs int
	// Caps of the stage pools (ONNX 4, BIE 2, NEF 4).
	Caps map[string]int
	// Slots of the agent that serves every pool (12: more than the caps
	// together, so only admission holds them).
	Slots int
	// Clients submitting the jobs at once (8).
	Clients int
}

// PipelineResult is the medians of the runs.
type PipelineResult struct {
	JobsPerMinute float64
	// QueuedP99: a stage's task completed → the next stage's task exists
	// (the process manager's reaction).
	QueuedP50, QueuedP99 time.Duration
	// ClaimableP99: a stage's task completed → the next stage's task is
	// claimable (the commit that created or admitted it), over the
	// hand-offs whose next pool had room at that moment (see roomAt: a
	// full pool makes it wait by design).
	ClaimableP50, ClaimableP99 time.Duration
	// Peak running stage tasks per pool over every run.
	Peak map[string]int
	// Steps splits the claimable hand-off (same hand-offs) at the
	// events the services record on the way, p50 and p99 of each.
	Steps []handoffStep
	// Slowest are the run's slowest claimable hand-offs, slowest first,
	// each split into the same steps: where its tail came from.
	Slowest []handoffTiming
}

// handoffTiming is one measured hand-off: when its stage ended (since
// the run's first job was created), the stages, how long it took to be
// claimable, and its steps (handoffSteps' order).
type handoffTiming struct {
	at         time.Duration
	from, to   string
	claimable  time.Duration
	stepsTaken []time.Duration
}

// slowestShown is how many of a run's slowest hand-offs it prints.
const slowestShown = 3

// slowest returns the n slowest of hs, slowest first.
func slowest(hs []handoffTiming, n int) []handoffTiming {
	out := slices.Clone(hs)
	slices.SortStableFunc(out, func(a, b handoffTiming) int { return cmp.Compare(b.claimable, a.claimable) })
	return out[:min(n, len(out))]
}

// String is one line: "0.23 s onnx → bie 265.1 ms (step 17.8 ms, …)".
func (h handoffTiming) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.2f s %s → %s %s (", h.at.Seconds(), h.from, h.to, ms(h.claimable))
	for i, d := range h.stepsTaken {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", handoffSteps[i].name, ms(d))
	}
	b.WriteString(")")
	return b.String()
}

// handoffStep is one step of the stage hand-off, from one recorded event
// to the next.
type handoffStep struct {
	name     string
	p50, p99 time.Duration
}

var pipelineStages = []string{"onnx", "bie", "nef"}

// Pipeline runs Jobs conversion jobs through the three stage pools with
// no-op stage programs on Taskmesh as `taskmesh dev` runs it (durable
// Postgres, the embedded broker, the quota service's admission, one agent
// in every pool), and reads the scheduler's event log back: jobs/min,
// the stage hand-off (task completed → next stage's task queued, and →
// claimable) and the most stage tasks that ran at once per pool. Times
// are the events' occurred_at, each taken by the deciding service's
// clock as it decided, except that a task is claimable from the commit
// that made it so (the server keeps commit times for this,
// track_commit_timestamp).
func Pipeline(ctx context.Context, o PipelineOptions) (*PipelineResult, error) {
	o.defaults()
	if o.Jobs <= 0 {
		o.Jobs = 200
	}
	if o.Caps == nil {
		o.Caps = map[string]int{"onnx": 4, "bie": 2, "nef": 4}
	}
	if o.Slots <= 0 {
		o.Slots = 12
	}
	if o.Clients <= 0 {
		o.Clients = 8
	}
	var rates, q50, q99, c50, c99 sample
	peak := map[string]int{}
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		r, err := pipelineRun(ctx, o, run)
		if err != nil {
			return nil, err
		}
		rates = append(rates, r.JobsPerMinute)
		q50, q99 = append(q50, float64(r.QueuedP50)), append(q99, float64(r.QueuedP99))
		c50, c99 = append(c50, float64(r.ClaimableP50)), append(c99, float64(r.ClaimableP99))
		for s, n := range r.Peak {
			peak[s] = max(peak[s], n)
		}
		rows = append(rows, []string{fmt.Sprint(run), fmt.Sprintf("%.0f", r.JobsPerMinute), ms(r.QueuedP50), ms(r.QueuedP99),
			ms(r.ClaimableP50), ms(r.ClaimableP99), fmt.Sprintf("%d / %d / %d", r.Peak["onnx"], r.Peak["bie"], r.Peak["nef"])})
		fmt.Fprintf(o.Out, "run %d: done → claimable in steps (p50 / p99):", run)
		for _, st := range r.Steps {
			fmt.Fprintf(o.Out, " %s %s / %s;", st.name, ms(st.p50), ms(st.p99))
		}
		fmt.Fprintln(o.Out)
		for _, h := range r.Slowest {
			fmt.Fprintf(o.Out, "run %d: slow hand-off at %s\n", run, h)
		}
	}
	fmt.Fprintf(o.Out, "\n%d jobs per run through the pools (caps ONNX %d, BIE %d, NEF %d; one agent of %d slots in every pool; no-op stage programs)\n",
		o.Jobs, o.Caps["onnx"], o.Caps["bie"], o.Caps["nef"], o.Slots)
	table(o.Out, []string{"run", "jobs/min", "done → next queued p50", "p99", "done → next claimable p50", "p99",
		"peak running ONNX / BIE / NEF"}, rows)
	res := &PipelineResult{JobsPerMinute: rates.median(), QueuedP50: time.Duration(q50.median()), QueuedP99: time.Duration(q99.median()),
		ClaimableP50: time.Duration(c50.median()), ClaimableP99: time.Duration(c99.median()), Peak: peak}
	capsHeld := true
	for _, s := range pipelineStages {
		capsHeld = capsHeld && peak[s] <= o.Caps[s]
	}
	summary(o.Out, o.Runs, [][]string{
		{"jobs/min", rates.format(perSecond), "", ""},
		{"stage done → next stage queued p50", q50.format(millis), "", ""},
		{"stage done → next stage queued p99", q99.format(millis), "", ""},
		{"stage done → next stage claimable p50 (next pool had room)", c50.format(millis), "", ""},
		{"stage done → next stage claimable p99 (next pool had room)", c99.format(millis), "< 100 ms", verdict(res.ClaimableP99 < 100*time.Millisecond)},
		{"peak running ONNX / BIE / NEF (all runs)", fmt.Sprintf("%d / %d / %d", peak["onnx"], peak["bie"], peak["nef"]),
			fmt.Sprintf("<= %d / %d / %d", o.Caps["onnx"], o.Caps["bie"], o.Caps["nef"]), verdict(capsHeld)},
	})
	return res, nil
}

// pipelineRun starts a fresh Taskmesh, runs the jobs and measures them.
func pipelineRun(ctx context.Context, o PipelineOptions, run int) (*PipelineResult, error) {
	dir := filepath.Join(o.Dir, "pipeline", fmt.Sprintf("run-%d", run))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	stages := map[string]scheduler.PipelineStage{}
	for s, sc := range scheduler.DefaultPipelineStages() {
		sc.Program = []string{"{self}", "pipeline-stage", "noop", "--workdir", "{workdir}", "out." + s}
		stages[s] = sc
	}
	// --pg-stats: the statements of the first run, from its first upload.
	stats := o.PGStats && run == 1
	params := pgstats.Params(stats, map[string]string{"track_commit_timestamp": "on"})
	st, err := stack.Start(ctx, stack.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Durable: true,
		PGParams: params,
		Agent:    true, AgentSlots: o.Slots, PipelineCaps: o.Caps, Pipeline: &scheduler.PipelineConfig{Stages: stages}})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	fmt.Fprintf(o.Out, "pipeline run %d: Taskmesh on %s (durable Postgres, embedded Kafka)\n", run, dir)
	var statsDB *pgxpool.Pool
	if stats {
		if statsDB, err = pg.Open(ctx, pg.Config{URL: st.Postgres, MaxConns: 1}); err != nil {
			return nil, err
		}
		defer statsDB.Close()
		if err := pgstats.Reset(ctx, statsDB); err != nil {
			return nil, err
		}
	}
	c := &client{base: st.HTTPURL, key: st.DemoAPIKey}
	model, err := c.upload("model", onnxStub())
	if err != nil {
		return nil, err
	}
	quant, err := c.upload("quant", zipStub())
	if err != nil {
		return nil, err
	}
	ids, err := c.createJobs(o.Jobs, o.Clients, model, quant)
	if err != nil {
		return nil, err
	}
	if err := waitJobs(ctx, st.Postgres, len(ids), 10*time.Minute); err != nil {
		return nil, err
	}
	if stats {
		if err := pgstats.Print(ctx, statsDB, o.Out); err != nil {
			return nil, err
		}
	}
	return measurePipeline(ctx, st.Postgres, o.Caps)
}

// onnxStub and zipStub are inputs the upload checks accept; the no-op
// programs never read them.
func onnxStub() []byte { return []byte("\x08\x08\x3a\x00") }

func zipStub() []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	_, _ = zw.Create("calib.bin")
	_ = zw.Close()
	return b.Bytes()
}

// client calls the pipeline API over REST.
type client struct{ base, key string }

func (c *client) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

func (c *client) upload(kind string, data []byte) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("kind", kind)
	fw, _ := mw.CreateFormFile("file", kind)
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, c.base+"/jobs/uploads", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	var out struct{ Key string }
	err := c.do(req, &out)
	return out.Key, err
}

// createJobs creates n jobs from clients goroutines.
func (c *client) createJobs(n, clients int, model, quant string) ([]string, error) {
	ids := make([]string, n)
	next := make(chan int)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body, _ := json.Marshal(map[string]string{"model_key": model, "quant_key": quant})
				req, _ := http.NewRequest(http.MethodPost, c.base+"/jobs", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				var out struct {
					JobID string `json:"job_id"`
				}
				if err := c.do(req, &out); err != nil {
					errs <- err
					return
				}
				ids[i] = out.JobID
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return ids, <-errs
}

// waitJobs waits until every job is COMPLETED, reading the jobs table
// (polling the API for 200 jobs would run into the tenant's rate limit);
// a FAILED job fails the run.
func waitJobs(ctx context.Context, url string, n int, limit time.Duration) error {
	db, err := pg.Open(ctx, pg.Config{URL: url, Schema: scheduler.PipelineSchema, MaxConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(limit)
	for {
		var done, failed int
		var reason string
		err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'FAILED'),
			coalesce(max(doc->'error'->>'reason'), '') FROM jobs`).Scan(&done, &failed, &reason)
		switch {
		case err != nil:
			return err
		case failed > 0:
			return fmt.Errorf("%d jobs FAILED, e.g.: %s", failed, reason)
		case done >= n:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d of %d jobs done after %s", done, n, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stageTask is one stage task's life from the event log.
type stageTask struct {
	stage                                  string
	submitted, admitted, started, finished time.Time
	// claimable is when the task became claimable: the commit of its
	// TaskAdmitted, or of its TaskSubmitted when it was not admitted.
	claimable time.Time
	// queuedAt and admittedAt: its workload's WorkloadQueued and
	// WorkloadAdmitted in the admission layer.
	queuedAt, admittedAt time.Time
	// handedOff is when its job's previous stage task finished (zero for
	// the first stage).
	handedOff time.Time
}

// measurePipeline reads the jobs and their stage tasks' events.
func measurePipeline(ctx context.Context, url string, caps map[string]int) (*PipelineResult, error) {
	jobsDB, err := pg.Open(ctx, pg.Config{URL: url, Schema: scheduler.PipelineSchema, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	defer jobsDB.Close()
	rows, err := jobsDB.Query(ctx, `SELECT doc, created_at, updated_at FROM jobs`)
	if err != nil {
		return nil, err
	}
	type job struct {
		tasks      map[string]string
		start, end time.Time
	}
	var jobs []job
	taskStage := map[string]string{}
	for rows.Next() {
		var doc []byte
		var j job
		if err := rows.Scan(&doc, &j.start, &j.end); err != nil {
			return nil, err
		}
		var d struct {
			StageTasks map[string]string `json:"stage_tasks"`
		}
		if err := json.Unmarshal(doc, &d); err != nil {
			return nil, err
		}
		j.tasks = d.StageTasks
		for s, id := range d.StageTasks {
			taskStage[id] = s
		}
		jobs = append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	tasks, err := stageTasks(ctx, url, taskStage)
	if err != nil {
		return nil, err
	}
	if err := workloadTimes(ctx, url, tasks); err != nil {
		return nil, err
	}
	r := &PipelineResult{Peak: map[string]int{}}
	first, last := jobs[0].start, jobs[0].end
	var queued, claimable []time.Duration
	steps := make([][]time.Duration, len(handoffSteps))
	type handoff struct{ prev, next *stageTask }
	var handoffs []handoff
	for _, j := range jobs {
		first, last = minTime(first, j.start), maxTime(last, j.end)
		for i := 0; i+1 < len(pipelineStages); i++ {
			prev, next := tasks[j.tasks[pipelineStages[i]]], tasks[j.tasks[pipelineStages[i+1]]]
			if prev == nil || next == nil {
				return nil, errors.New("a job lacks a stage task")
			}
			next.handedOff = prev.finished
			handoffs = append(handoffs, handoff{prev, next})
		}
	}
	var timings []handoffTiming
	for _, h := range handoffs {
		prev, next := h.prev, h.next
		queued = append(queued, next.submitted.Sub(prev.finished))
		if roomAt(tasks, next, prev.finished) < caps[next.stage] {
			claimable = append(claimable, next.claimable.Sub(prev.finished))
			ht := handoffTiming{at: prev.finished.Sub(first), from: prev.stage, to: next.stage,
				claimable: next.claimable.Sub(prev.finished)}
			for i, st := range handoffSteps {
				d := st.took(prev, next)
				steps[i] = append(steps[i], d)
				ht.stepsTaken = append(ht.stepsTaken, d)
			}
			timings = append(timings, ht)
		}
	}
	r.Slowest = slowest(timings, slowestShown)
	r.JobsPerMinute = float64(len(jobs)) / last.Sub(first).Minutes()
	r.QueuedP50, r.QueuedP99 = percentile(queued, 50), percentile(queued, 99)
	r.ClaimableP50, r.ClaimableP99 = percentile(claimable, 50), percentile(claimable, 99)
	for _, s := range pipelineStages {
		r.Peak[s] = peakRunning(tasks, s)
	}
	for i, st := range handoffSteps {
		r.Steps = append(r.Steps, handoffStep{name: st.name, p50: percentile(steps[i], 50), p99: percentile(steps[i], 99)})
	}
	return r, nil
}

// handoffSteps split a hand-off from the stage task's end (prev) to the
// next stage's task claimable (next) at the events on the way: the
// scheduler's TaskSubmitted, the admission loop's WorkloadQueued and
// WorkloadAdmitted (in the quota service's event store), the scheduler's
// TaskAdmitted. A step an event is missing from (a task admitted without
// a queue) counts as 0.
var handoffSteps = []struct {
	name string
	took func(prev, next *stageTask) time.Duration
}{
	{"done → next submitted", func(p, n *stageTask) time.Duration { return n.submitted.Sub(p.finished) }},
	{"submitted → workload queued", func(_, n *stageTask) time.Duration { return since(n.submitted, n.queuedAt) }},
	{"workload queued → admitted", func(_, n *stageTask) time.Duration { return since(n.queuedAt, n.admittedAt) }},
	{"workload admitted → task admitted", func(_, n *stageTask) time.Duration { return since(n.admittedAt, n.admitted) }},
	{"task admitted → committed", func(_, n *stageTask) time.Duration { return since(maxTime(n.submitted, n.admitted), n.claimable) }},
}

func since(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() {
		return 0
	}
	return to.Sub(from)
}

// workloadTimes reads, from the admission layer's event store, when each
// task's workload was first queued and admitted.
func workloadTimes(ctx context.Context, url string, tasks map[string]*stageTask) error {
	db, err := pg.Open(ctx, pg.Config{URL: url, Schema: admission.Schema, MaxConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	// A workload's aggregate id is "workload/<task id>".
	ids := make([]string, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, "workload/"+id)
	}
	rows, err := db.Query(ctx, `SELECT substr(aggregate_id, length('workload/') + 1), event_type, min(occurred_at) FROM events WHERE aggregate_id = ANY($1)
		AND event_type IN ('WorkloadQueued', 'WorkloadAdmitted') GROUP BY aggregate_id, event_type`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, typ string
		var at time.Time
		if err := rows.Scan(&id, &typ, &at); err != nil {
			return err
		}
		if typ == "WorkloadQueued" {
			tasks[id].queuedAt = at
		} else {
			tasks[id].admittedAt = at
		}
	}
	return rows.Err()
}

// stageTasks reads the life of every stage task from the scheduler's
// event store.
func stageTasks(ctx context.Context, url string, stageOf map[string]string) (map[string]*stageTask, error) {
	db, err := pg.Open(ctx, pg.Config{URL: url, Schema: scheduler.Schema, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ids := make([]string, 0, len(stageOf))
	for id := range stageOf {
		ids = append(ids, id)
	}
	// xmin is the transaction that wrote the event; its commit time is
	// when the event took effect.
	rows, err := db.Query(ctx, `SELECT aggregate_id, event_type, occurred_at, pg_xact_commit_timestamp(xmin) FROM events
		WHERE aggregate_id = ANY($1) AND event_type IN ('TaskSubmitted', 'TaskAdmitted', 'TaskStarted', 'TaskSucceeded', 'TaskFailed')`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*stageTask{}
	for rows.Next() {
		var id, typ string
		var at time.Time
		var committed *time.Time
		if err := rows.Scan(&id, &typ, &at, &committed); err != nil {
			return nil, err
		}
		if committed == nil {
			return nil, errors.New("the server kept no commit time of an event (track_commit_timestamp is off)")
		}
		t := out[id]
		if t == nil {
			t = &stageTask{stage: stageOf[id]}
			out[id] = t
		}
		switch typ {
		case "TaskSubmitted":
			t.submitted = at
			t.claimable = maxTime(t.claimable, *committed)
		case "TaskAdmitted":
			t.admitted = at
			t.claimable = maxTime(t.claimable, *committed)
		case "TaskStarted":
			t.started = at
		default:
			t.finished = at
		}
	}
	return out, rows.Err()
}

// roomAt counts the slots of next's pool that were taken or spoken for
// when the stage before it finished at t: its tasks whose workload the
// admission loop had admitted (WorkloadAdmitted, when the quota is
// taken) and that had not ended; those created and not admitted yet
// (next would wait behind them, StrictFIFO, however fast its
// hand-off); and the hand-offs to the pool still on their way, whose
// previous stage finished before t. Fewer than the pool's cap: the
// pool had room for next, and its hand-off is measured. (Counting
// only admitted and created tasks would count a pool emptied at once
// as room for every hand-off racing toward it.)
func roomAt(tasks map[string]*stageTask, next *stageTask, t time.Time) int {
	n := 0
	for _, x := range tasks {
		if x == next || x.stage != next.stage {
			continue
		}
		switch {
		case !x.handedOff.IsZero() && x.handedOff.Before(t) && x.submitted.After(t): // on its way
			n++
		case !x.submitted.After(t) && (x.admittedAt.IsZero() || x.admittedAt.After(t)): // waiting
			n++
		case !x.admittedAt.IsZero() && !x.admittedAt.After(t) && x.finished.After(t): // holding
			n++
		}
	}
	return n
}

// peakRunning is the most tasks of stage running at once (started, not
// finished; an end at the instant of a start counts first).
func peakRunning(tasks map[string]*stageTask, stage string) int {
	type change struct {
		at    time.Time
		delta int
	}
	var cs []change
	for _, t := range tasks {
		if t.stage == stage && !t.started.IsZero() {
			cs = append(cs, change{t.started, 1}, change{t.finished, -1})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if !cs[i].at.Equal(cs[j].at) {
			return cs[i].at.Before(cs[j].at)
		}
		return cs[i].delta < cs[j].delta
	})
	peak, now := 0, 0
	for _, c := range cs {
		now += c.delta
		peak = max(peak, now)
	}
	return peak
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
