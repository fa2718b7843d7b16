package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/slurmcluster"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// SlurmOptions configures the Slurm benchmark.
type SlurmOptions struct {
	Common
	// Jobs submitted at once, and held at once in the throughput run (100).
	Jobs int
	// Tasks of the throughput run (3 × Jobs).
	Tasks int
	// Poll is the backend's poll of slurmctld's job list, and PendingPoll
	// its poll while jobs wait to start; zero takes the backend's
	// defaults (1 s, 100 ms), what `taskmesh executor --backend slurm`
	// runs with.
	Poll, PendingPoll time.Duration
	// Spread is the time the latency phase's submissions are spread over
	// (10 s).
	Spread time.Duration
	// NoStartSignal runs the backend without the placeholders' start
	// signal: starts are seen by listing slurmctld's jobs only.
	NoStartSignal bool
}

// SlurmResult is the medians of the runs.
type SlurmResult struct {
	// Taskmesh: submit → the placeholder RUNNING in Slurm → the task
	// running in Taskmesh.
	ToSlurmP50, ToSlurmP99, ToTaskmeshP50, ToTaskmeshP99 time.Duration
	// SlurmToTaskmesh: the placeholder RUNNING → the task running.
	SlurmToTaskmeshP50, SlurmToTaskmeshP99 time.Duration
	// Anchor: sbatch → RUNNING for the same jobs, same run.
	SbatchP50, SbatchP99 time.Duration
	// The work's own start: the same script, run through sbatch and
	// through Taskmesh, records when it began. SbatchScript is sbatch →
	// the script began (the anchor of Overhead), TaskmeshScript submit →
	// the script began.
	SbatchScriptP50, SbatchScriptP99, TaskmeshScriptP50, TaskmeshScriptP99 time.Duration
	// TasksPerSecond with Jobs placeholders in flight.
	TasksPerSecond float64
	// Overhead is Taskmesh's submit → the script began, p50, over
	// sbatch's (the target's figure). StateOverhead compares states
	// instead: Taskmesh's submit → running over sbatch → RUNNING, which
	// is an allocation, before slurmd has launched anything.
	Overhead, StateOverhead float64
}

// Slurm measures the Slurm backend in placement mode on a real Slurm on
// loopback (deployments/slurm/cluster.sh: two nodes of 128 CPUs each, so
// every job of a run fits at once) and Taskmesh as `taskmesh dev` runs it
// (durable Postgres, embedded broker), with a Taskmesh agent per node.
// Each run:
//
//  1. latency: Jobs tasks (`sleep 10`) through the REST API and, each at
//     the same instant, the same job through sbatch (the anchor), spread
//     over Spread; by its end Jobs placeholders are held at once.
//     sbatch → RUNNING; submit → placeholder RUNNING → task running.
//  2. throughput: Tasks no-op tasks with Jobs in flight (a new one
//     submitted as one completes): tasks/s from the first submission to
//     the last completion.
//
// RUNNING is when a 50 ms squeue poll first shows the job, for both
// paths. Both paths run the same script (startScript), which records
// when it began: the overhead compares the moments the work itself
// began. Both submit the same job, nice included: slurmctld launches a
// pass's jobs in priority order (docs/slurm.md, "Measuring the
// overhead"). Needs root and the packages the script names.
func Slurm(ctx context.Context, o SlurmOptions) (*SlurmResult, error) {
	o.defaults()
	if o.Jobs <= 0 {
		o.Jobs = 100
	}
	if o.Tasks <= 0 {
		o.Tasks = 3 * o.Jobs
	}
	if o.Spread <= 0 {
		o.Spread = 10 * time.Second
	}
	b, err := startSlurmBench(ctx, o)
	if err != nil {
		return nil, err
	}
	defer b.close()
	var toSlurm50, toSlurm99, leg50, leg99, total50, total99, sb50, sb99, rates, overheads, stateOverheads sample
	var sbScript50, sbScript99, tmScript50, tmScript99 sample
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		r, err := b.run(ctx, run)
		if err != nil {
			return nil, err
		}
		toSlurm50, toSlurm99 = append(toSlurm50, float64(r.ToSlurmP50)), append(toSlurm99, float64(r.ToSlurmP99))
		total50, total99 = append(total50, float64(r.ToTaskmeshP50)), append(total99, float64(r.ToTaskmeshP99))
		leg50, leg99 = append(leg50, float64(r.SlurmToTaskmeshP50)), append(leg99, float64(r.SlurmToTaskmeshP99))
		sb50, sb99 = append(sb50, float64(r.SbatchP50)), append(sb99, float64(r.SbatchP99))
		sbScript50, sbScript99 = append(sbScript50, float64(r.SbatchScriptP50)), append(sbScript99, float64(r.SbatchScriptP99))
		tmScript50, tmScript99 = append(tmScript50, float64(r.TaskmeshScriptP50)), append(tmScript99, float64(r.TaskmeshScriptP99))
		rates, overheads = append(rates, r.TasksPerSecond), append(overheads, r.Overhead)
		stateOverheads = append(stateOverheads, r.StateOverhead)
		rows = append(rows, []string{fmt.Sprint(run), ms(r.SbatchP50), ms(r.ToSlurmP50), ms(r.SlurmToTaskmeshP50), ms(r.ToTaskmeshP50),
			ratio(r.StateOverhead), ms(r.SbatchScriptP50), ms(r.TaskmeshScriptP50), ms(r.TaskmeshScriptP99),
			ratio(r.Overhead), fmt.Sprintf("%.1f", r.TasksPerSecond)})
	}
	starts := "starts signalled by the placeholders, job listing every " + orDefault(o.Poll, "1s")
	if o.NoStartSignal {
		starts = fmt.Sprintf("no start signal, backend poll %s, %s while jobs wait to start", orDefault(o.Poll, "1s"), orDefault(o.PendingPoll, "100ms"))
	}
	fmt.Fprintf(o.Out, "\n%d tasks and %d sbatch jobs per run spread over %s, each 1 CPU, 10 MB, nice %d; %d no-op tasks with %d placeholders in flight (placement mode, %s)\n",
		o.Jobs, o.Jobs, o.Spread, b.anchorNice, o.Tasks, o.Jobs, starts)
	table(o.Out, []string{"run", "sbatch → RUNNING p50", "submit → Slurm RUNNING p50", "→ Taskmesh running p50",
		"submit → Taskmesh running p50", "state ×", "sbatch → script p50", "Taskmesh → script p50", "p99", "overhead ×", "tasks/s"}, rows)
	res := &SlurmResult{ToSlurmP50: time.Duration(toSlurm50.median()), ToSlurmP99: time.Duration(toSlurm99.median()),
		ToTaskmeshP50: time.Duration(total50.median()), ToTaskmeshP99: time.Duration(total99.median()),
		SlurmToTaskmeshP50: time.Duration(leg50.median()), SlurmToTaskmeshP99: time.Duration(leg99.median()),
		SbatchP50: time.Duration(sb50.median()), SbatchP99: time.Duration(sb99.median()),
		SbatchScriptP50: time.Duration(sbScript50.median()), SbatchScriptP99: time.Duration(sbScript99.median()),
		TaskmeshScriptP50: time.Duration(tmScript50.median()), TaskmeshScriptP99: time.Duration(tmScript99.median()),
		TasksPerSecond: rates.median(), Overhead: overheads.median(), StateOverhead: stateOverheads.median()}
	summary(o.Out, o.Runs, [][]string{
		{"sbatch → RUNNING p50", sb50.format(millis), "", ""},
		{"sbatch → RUNNING p99", sb99.format(millis), "", ""},
		{"submit → Slurm RUNNING p50", toSlurm50.format(millis), "", ""},
		{"submit → Slurm RUNNING p99", toSlurm99.format(millis), "", ""},
		{"Slurm RUNNING → Taskmesh running p50", leg50.format(millis), "", ""},
		{"Slurm RUNNING → Taskmesh running p99", leg99.format(millis), "", ""},
		{"submit → Taskmesh running p50", total50.format(millis), "", ""},
		{"submit → Taskmesh running p99", total99.format(millis), "", ""},
		{"states: Taskmesh running p50 / sbatch RUNNING p50", stateOverheads.format(ratio), "", ""},
		{"sbatch → the script began p50 (anchor)", sbScript50.format(millis), "", ""},
		{"sbatch → the script began p99", sbScript99.format(millis), "", ""},
		{"Taskmesh submit → the script began p50", tmScript50.format(millis), "", ""},
		{"Taskmesh submit → the script began p99", tmScript99.format(millis), "", ""},
		{"overhead: Taskmesh p50 / sbatch p50, the script began", overheads.format(ratio), "≤ 1.2", verdict(res.Overhead <= 1.2)},
		{fmt.Sprintf("tasks/s with %d placeholders in flight", o.Jobs), rates.format(func(x float64) string { return fmt.Sprintf("%.1f", x) }), "", ""},
	})
	return res, nil
}

// slurmBench is the cluster, Taskmesh, the node agents and the backend.
type slurmBench struct {
	o       SlurmOptions
	cluster *slurmcluster.Cluster
	st      *stack.Stack
	stop    context.CancelFunc
	done    sync.WaitGroup
	watch   *runningWatch
	http    *http.Client
	// key is a premium tenant's: its 3000 requests a minute cover the
	// submissions of several runs.
	key string
	db  *pgxpool.Pool
	// anchorNice is the nice the backend gives the latency phase's
	// placeholders (their tasks' priority, latencyPriority, mapped as the
	// backend maps it): the anchor's sbatch asks for the same, so that
	// neither path's jobs outrank the other's in slurmctld's passes.
	anchorNice int
	// log receives the backend's log and the watch's sightings
	// (--service-log); logFile is its file, nil without.
	log     *slog.Logger
	logFile *os.File
}

func startSlurmBench(ctx context.Context, o SlurmOptions) (_ *slurmBench, err error) {
	dir := filepath.Join(o.Dir, "slurm")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	cluster, err := slurmcluster.Start(ctx, slurmcluster.Options{
		Nodes: []slurmcluster.Node{{Name: "node-a"}, {Name: "node-b"}}, NoDownNodes: true, CPUs: 128, MemoryMB: 64000,
	})
	if err != nil {
		return nil, err
	}
	b := &slurmBench{o: o, cluster: cluster, http: &http.Client{Timeout: time.Minute}}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.log, b.logFile, err = serviceLog(o.Common, "slurm"); err != nil {
		return nil, err
	}
	if b.st, err = stack.Start(ctx, stack.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Durable: true}); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "slurm: Slurm on loopback in %s, Taskmesh on %s (durable Postgres, embedded Kafka)\n", cluster.Dir, dir)
	creds := b.st.Gateway.Credentials()
	if _, err := creds.CreateTenant(ctx, "bench", "bench", gateway.TierPremium); err != nil {
		return nil, err
	}
	if _, b.key, err = creds.CreateAPIKey(ctx, "bench", "bench", nil); err != nil {
		return nil, err
	}
	if b.db, err = pg.Open(ctx, pg.Config{URL: b.st.Postgres, Schema: scheduler.Schema, MaxConns: 4}); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = stop
	agents := map[string]string{}
	for _, n := range cluster.Nodes {
		addr, err := freeport.Addr("127.0.0.1")
		if err != nil {
			return nil, err
		}
		cfg := executor.Config{AgentID: "agent-" + n.Name, MachineID: n.Name, Slots: o.Jobs, LocalAPIAddr: addr,
			DataDir: filepath.Join(dir, "agent-"+n.Name)}
		b.goRun(func() error { return executor.Run(runCtx, cfg) })
		agents[n.Name] = "http://" + addr
	}
	_, token, err := b.st.Gateway.Credentials().CreateAgentToken(ctx, "slurm-bench", "", nil, nil)
	if err != nil {
		return nil, err
	}
	cfg := executor.SlurmConfig{AgentID: "slurm-bench", Server: b.st.GRPCAddr, Token: token, RESTEndpoint: "unix:" + cluster.Socket,
		Mode: "placement", Partition: cluster.Partition, Slots: o.Jobs, DefaultMemoryMB: 10, NodeAgents: agents,
		StateDir: filepath.Join(dir, "slurm-state"), PollInterval: o.Poll, PendingPollInterval: o.PendingPoll, ClaimWait: 5 * time.Second,
		Logger: b.log.With("service", "slurm-backend")}
	if !o.NoStartSignal {
		cfg.StartSignalListen = "127.0.0.1:0"
	}
	b.anchorNice = executor.SlurmNice(cfg, latencyPriority)
	b.goRun(func() error { return executor.RunSlurm(runCtx, cfg) })
	b.watch = &runningWatch{cluster: cluster, seen: map[string]time.Time{}, log: b.log}
	b.goRun(func() error { b.watch.run(runCtx); return nil })
	return b, nil
}

func (b *slurmBench) goRun(f func() error) {
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		if err := f(); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(b.o.Out, "slurm bench:", err)
		}
	}()
}

func (b *slurmBench) close() {
	if b.stop != nil {
		b.stop()
		b.done.Wait()
	}
	if b.db != nil {
		b.db.Close()
	}
	if b.st != nil {
		b.st.Close()
	}
	_ = b.cluster.Close()
	if b.logFile != nil {
		_ = b.logFile.Close()
	}
}

// run is one run: the latency phase, then the throughput run.
func (b *slurmBench) run(ctx context.Context, run int) (*SlurmResult, error) {
	var r SlurmResult
	if err := b.latency(ctx, run, &r); err != nil {
		return nil, err
	}
	rate, err := b.throughput(ctx, run)
	if err != nil {
		return nil, err
	}
	r.TasksPerSecond = rate
	if r.SbatchP50 > 0 {
		r.StateOverhead = float64(r.ToTaskmeshP50) / float64(r.SbatchP50)
	}
	if r.SbatchScriptP50 > 0 {
		r.Overhead = float64(r.TaskmeshScriptP50) / float64(r.SbatchScriptP50)
	}
	return &r, nil
}

// latency submits Jobs pairs — a sleeping task through Taskmesh's REST
// API and the same job through sbatch, at the same instant — spread
// evenly over Spread. slurmctld starts batch jobs in passes (every
// batch_sched_delay, 3 s by default), so a job's wait depends on where in
// that cycle it arrives: pairs submitted together meet the same cycle,
// and spreading them over several cycles gives both paths every phase of
// it. Both run startScript, which writes when it began to a file of its
// own. Measured: sbatch → the job first seen RUNNING, and → its script
// began (the anchor); submit → the placeholder first seen RUNNING (the
// same poll) → the task's started_at, and → its script began.
func (b *slurmBench) latency(ctx context.Context, run int, r *SlurmResult) error {
	n := b.o.Jobs
	taskAt, sbatchAt := make([]time.Time, n), make([]time.Time, n)
	ids, anchors := make([]string, n), make([]string, n)
	script := filepath.Join(b.cluster.JobDir, "bench-start.sh")
	if err := os.WriteFile(script, []byte(startScript), 0o755); err != nil {
		return err
	}
	startFile := func(path string, i int) string {
		return filepath.Join(b.cluster.JobDir, fmt.Sprintf("start-%d-%s-%d", run, path, i))
	}
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * b.o.Spread / time.Duration(n))); wait > 0 {
			time.Sleep(wait)
		}
		anchors[i] = fmt.Sprintf("anchor-%d-%d", run, i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			taskAt[i] = time.Now()
			id, err := b.submit(ctx, map[string]any{"name": "latency", "type": "shell", "command": "/bin/bash",
				"args": []string{script, startFile("taskmesh", i)}, "timeout": 600, "priority": latencyPriority})
			if err != nil {
				errs <- err
			}
			ids[i] = id
		}()
		go func() {
			defer wg.Done()
			sbatchAt[i] = time.Now()
			if _, err := b.cluster.Output(ctx, "sbatch", "--parsable", "-J", anchors[i], "-c", "1", "--mem=10", "-o", "/dev/null",
				"--nice="+strconv.Itoa(b.anchorNice), script, startFile("sbatch", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	names := make([]string, 0, 2*n)
	for i := range n {
		names = append(names, anchors[i], "tm-"+ids[i])
	}
	seen, err := b.watch.wait(ctx, names, 5*time.Minute)
	if err != nil {
		return err
	}
	started, err := b.startedAt(ctx, ids, time.Minute)
	if err != nil {
		return err
	}
	var anchor, toSlurm, leg, total, sbScript, tmScript []time.Duration
	for i, id := range ids {
		anchor = append(anchor, seen[anchors[i]].Sub(sbatchAt[i]))
		toSlurm = append(toSlurm, seen["tm-"+id].Sub(taskAt[i]))
		leg = append(leg, started[id].Sub(seen["tm-"+id]))
		total = append(total, started[id].Sub(taskAt[i]))
		sbBegan, err := scriptBegan(ctx, startFile("sbatch", i), time.Minute)
		if err != nil {
			return err
		}
		tmBegan, err := scriptBegan(ctx, startFile("taskmesh", i), time.Minute)
		if err != nil {
			return err
		}
		sbScript, tmScript = append(sbScript, sbBegan.Sub(sbatchAt[i])), append(tmScript, tmBegan.Sub(taskAt[i]))
		// Beside the backend's own steps in --service-log.
		b.log.Info("script began", "task_id", id, "began_at", tmBegan)
		b.log.Info("script began", "name", anchors[i], "began_at", sbBegan)
	}
	r.SbatchScriptP50, r.SbatchScriptP99 = percentile(sbScript, 50), percentile(sbScript, 99)
	r.TaskmeshScriptP50, r.TaskmeshScriptP99 = percentile(tmScript, 50), percentile(tmScript, 99)
	r.SlurmToTaskmeshP50, r.SlurmToTaskmeshP99 = percentile(leg, 50), percentile(leg, 99)
	r.SbatchP50, r.SbatchP99 = percentile(anchor, 50), percentile(anchor, 99)
	r.ToSlurmP50, r.ToSlurmP99 = percentile(toSlurm, 50), percentile(toSlurm, 99)
	r.ToTaskmeshP50, r.ToTaskmeshP99 = percentile(total, 50), percentile(total, 99)
	if err := b.waitCompleted(ctx, ids, 5*time.Minute); err != nil {
		return err
	}
	return b.drain(ctx)
}

// latencyPriority is the latency phase's tasks' priority: the default.
const latencyPriority = 5

// startScript is the work of the latency phase, the same through sbatch
// and through Taskmesh: it writes when it began (bash's clock, no process
// spawned to read it) to the file it is given, then sleeps.
const startScript = `#!/bin/bash
echo "$EPOCHREALTIME" > "$1"
exec sleep 10
`

// scriptBegan waits for a start file of startScript and returns the time
// it holds.
func scriptBegan(ctx context.Context, path string, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		raw, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(raw), "\n") {
			return parseEpoch(strings.TrimSpace(string(raw)))
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: the script did not record its start in %s (%v)", path, limit, err)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// parseEpoch reads bash's $EPOCHREALTIME: seconds, a decimal point (the
// locale's; "." or ","), microseconds.
func parseEpoch(s string) (time.Time, error) {
	sec, frac, ok := strings.Cut(strings.ReplaceAll(s, ",", "."), ".")
	if !ok || len(frac) != 6 {
		return time.Time{}, fmt.Errorf("not an $EPOCHREALTIME: %q", s)
	}
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	micros, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("not an $EPOCHREALTIME: %q", s)
	}
	return time.Unix(secs, micros*1000), nil
}

// throughput runs Tasks no-op tasks, Jobs in flight, and returns tasks/s.
func (b *slurmBench) throughput(ctx context.Context, _ int) (float64, error) {
	start := time.Now()
	slots := make(chan struct{}, b.o.Jobs)
	errs := make(chan error, b.o.Tasks)
	var wg sync.WaitGroup
	for range b.o.Tasks {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			id, err := b.submit(ctx, map[string]any{"name": "flow", "type": "noop", "timeout": 600})
			if err == nil {
				err = b.waitCompleted(ctx, []string{id}, 5*time.Minute)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	rate := float64(b.o.Tasks) / time.Since(start).Seconds()
	return rate, b.drain(ctx)
}

// drain waits until Slurm's queue is empty, so runs do not overlap.
func (b *slurmBench) drain(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		out, err := b.cluster.Output(ctx, "squeue", "-h", "-o", "%i")
		if err == nil && strings.TrimSpace(out) == "" {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("the Slurm queue did not drain in 3 minutes")
}

func (b *slurmBench) submit(ctx context.Context, task map[string]any) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	if err := b.call(ctx, http.MethodPost, "/api/v1/tasks", task, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// taskState reads tasks from the scheduler's inline projection: polling
// the REST API for them would spend the tenant's rate limit.
type taskState struct {
	status, errText string
	started         time.Time
}

func (b *slurmBench) tasks(ctx context.Context, ids []string) (map[string]taskState, error) {
	rows, err := b.db.Query(ctx, `SELECT id, status, coalesce(doc->>'started_at', ''), coalesce(doc->>'error', '') FROM tasks WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]taskState, len(ids))
	for rows.Next() {
		var id, started string
		var st taskState
		if err := rows.Scan(&id, &st.status, &started, &st.errText); err != nil {
			return nil, err
		}
		if started != "" {
			if st.started, err = time.Parse(time.RFC3339Nano, started); err != nil {
				return nil, err
			}
		}
		out[id] = st
	}
	return out, rows.Err()
}

// startedAt waits until every task has started and returns when each did.
func (b *slurmBench) startedAt(ctx context.Context, ids []string, limit time.Duration) (map[string]time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		states, err := b.tasks(ctx, ids)
		if err != nil {
			return nil, err
		}
		out := make(map[string]time.Time, len(ids))
		for id, st := range states {
			if !st.started.IsZero() {
				out[id] = st.started
			}
		}
		if len(out) == len(ids) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d tasks not started after %s", len(ids)-len(out), len(ids), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCompleted waits until every task completed; any other end fails
// the run.
func (b *slurmBench) waitCompleted(ctx context.Context, ids []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		states, err := b.tasks(ctx, ids)
		if err != nil {
			return err
		}
		done := 0
		for id, st := range states {
			switch st.status {
			case "completed":
				done++
			case "failed", "cancelled":
				return fmt.Errorf("task %s %s: %s", id, st.status, st.errText)
			}
		}
		if done == len(ids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d tasks completed after %s", done, len(ids), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *slurmBench) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequestWithContext(ctx, method, b.st.HTTPURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+b.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// runningWatch polls squeue every 50 ms and keeps when each job name was
// first seen RUNNING: the same observation for sbatch's jobs and for
// Taskmesh's placeholders. Each sighting is logged with the job id, so
// the service log splits a placeholder's leg at the backend's own steps.
type runningWatch struct {
	cluster *slurmcluster.Cluster
	log     *slog.Logger
	mu      sync.Mutex
	seen    map[string]time.Time
}

func (w *runningWatch) run(ctx context.Context) {
	for ctx.Err() == nil {
		out, err := w.cluster.Output(ctx, "squeue", "-h", "-t", "RUNNING", "-o", "%i %j")
		now := time.Now()
		if err == nil {
			w.mu.Lock()
			for line := range strings.Lines(out) {
				id, name, ok := strings.Cut(strings.TrimSpace(line), " ")
				if !ok {
					continue
				}
				if _, ok := w.seen[name]; !ok {
					w.seen[name] = now
					w.log.Info("job seen running", "job_id", id, "name", name, "seen_at", now)
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// wait returns when every name was seen RUNNING.
func (w *runningWatch) wait(ctx context.Context, names []string, limit time.Duration) (map[string]time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		w.mu.Lock()
		missing := 0
		out := make(map[string]time.Time, len(names))
		for _, n := range names {
			if t, ok := w.seen[n]; ok {
				out[n] = t
			} else {
				missing++
			}
		}
		w.mu.Unlock()
		if missing == 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d jobs not seen RUNNING after %s", missing, len(names), limit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// orDefault prints a duration option, or the default zero stands for.
func orDefault(d time.Duration, def string) string {
	if d <= 0 {
		return def
	}
	return d.String()
}
