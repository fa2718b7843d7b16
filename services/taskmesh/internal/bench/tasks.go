package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// TasksOptions configures the task scheduler benchmark.
type TasksOptions struct {
	Common
	Tasks      int           // no-op tasks per burn-down
	Agents     int           // concurrent agents
	ClaimBatch int           // tasks per claim
	InFlight   int           // completions in flight per agent
	StartRate  int           // submissions/s of the submit → start run
	StartFor   time.Duration // length of the submit → start run
	// BurnProfile, if set, receives a CPU profile of the first burn-down
	// alone (not the submission or the peer).
	BurnProfile string
	SpawnTasks  int // /bin/true tasks run through a real executor
	SpawnSlots  int
}

func (o *TasksOptions) defaults() {
	o.Common.defaults()
	if o.Tasks <= 0 {
		o.Tasks = 100_000
	}
	if o.Agents <= 0 {
		o.Agents = 8
	}
	if o.ClaimBatch <= 0 {
		o.ClaimBatch = 200
	}
	if o.InFlight <= 0 {
		o.InFlight = 64
	}
	if o.StartRate <= 0 {
		o.StartRate = 500
	}
	if o.StartFor <= 0 {
		o.StartFor = 20 * time.Second
	}
	if o.SpawnTasks <= 0 {
		o.SpawnTasks = 1000
	}
	if o.SpawnSlots <= 0 {
		o.SpawnSlots = 8
	}
}

// TasksResult holds the medians of the runs.
type TasksResult struct {
	BurnDown float64 // tasks/s claimed+completed, with events in Kafka and task_views caught up
	Submit   float64 // tasks/s submitted over gRPC
	River    float64 // River jobs/s, same server
	Ratio    float64 // median of the runs' BurnDown / River
	StartP50 time.Duration
	StartP99 time.Duration
	// StartRate is the submission rate the open-loop generator achieved.
	StartRate float64
	// Recovery: an agent stops heartbeating → its task leased to another,
	// with the scheduler's production timing.
	Recovery        time.Duration
	ProcessSpawning float64 // tasks/s through a real executor with /bin/true (target SpawnTarget)
}

const benchToken = "bench-internal-token"

// tasksRun is one run's figures.
type tasksRun struct {
	burn, submit, river float64
	burnCPU, riverCPU   perItem // per task and per job
	riverFirst          bool
	start               startFigures
	recovery            time.Duration
	spawn, bareSpawn    float64 // tasks/s; /bin/true processes/s without Taskmesh
}

// Tasks measures the scheduler, each figure once per run: burn-down of
// no-op tasks through the real gRPC lease API (claims batched, one
// CompleteTask per task), counted end to end only once every event is in
// Kafka and the task_views projection caught up; River working the same
// number of no-op jobs on the same Postgres as the peer, before Taskmesh in
// even runs and after it in odd ones; submit → start latency under an
// open-loop generator at a fixed rate; how fast a task held by an agent
// that stopped heartbeating runs again; and /bin/true tasks through a real
// executor agent.
func Tasks(ctx context.Context, o TasksOptions) (*TasksResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "tasks", nil)
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "task scheduler: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	var runs []tasksRun
	for run := 1; run <= o.Runs; run++ {
		r, err := tasksOnce(ctx, env, o, run)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		runs = append(runs, r)
	}
	return reportTasks(o, runs), nil
}

// tasksOnce takes every figure of one run.
func tasksOnce(ctx context.Context, env *env, o TasksOptions, run int) (tasksRun, error) {
	r := tasksRun{riverFirst: run%2 == 0}
	var err error
	if r.riverFirst {
		if r.river, r.riverCPU, err = riverPeer(ctx, env, o.Tasks, run); err != nil {
			return r, err
		}
	}
	if r.burn, r.burnCPU, r.submit, err = burnDown(ctx, env, o, run); err != nil {
		return r, err
	}
	// Each phase's database is dropped once its figures are taken, as
	// River's is: the vacuum and the dirty pages of the burn-down's rows
	// would otherwise fall on the measurements that follow it
	// (docs/operations.md, "Benchmarks on one machine").
	if err := env.dropDatabase(ctx, burnDatabase(run)); err != nil {
		return r, err
	}
	if !r.riverFirst {
		if r.river, r.riverCPU, err = riverPeer(ctx, env, o.Tasks, run); err != nil {
			return r, err
		}
	}
	if r.start, r.recovery, err = startAndRecovery(ctx, env, o, run); err != nil {
		return r, err
	}
	if err := env.dropDatabase(ctx, latencyDatabase(run)); err != nil {
		return r, err
	}
	if r.spawn, err = spawning(ctx, env, o, run); err != nil {
		return r, err
	}
	r.bareSpawn, err = bareSpawns(ctx, o.SpawnTasks, o.SpawnSlots)
	return r, err
}

// reportTasks prints every run, River's figures by order, and the medians.
func reportTasks(o TasksOptions, runs []tasksRun) *TasksResult {
	var burn, submit, river, ratios, p50s, p99s, rates, recs, spawn, bare, spawnRatios sample
	var burnCPU, riverCPU, cpuRatios sample
	var rows [][]string
	for i, r := range runs {
		burn, submit, river, ratios = append(burn, r.burn), append(submit, r.submit), append(river, r.river), append(ratios, r.burn/r.river)
		burnCPU, riverCPU = append(burnCPU, float64(r.burnCPU.total())), append(riverCPU, float64(r.riverCPU.total()))
		cpuRatios = append(cpuRatios, float64(r.riverCPU.total())/float64(max(r.burnCPU.total(), 1)))
		p50s, p99s, rates = append(p50s, float64(r.start.p50)), append(p99s, float64(r.start.p99)), append(rates, r.start.achieved)
		recs, spawn = append(recs, float64(r.recovery)), append(spawn, r.spawn)
		bare, spawnRatios = append(bare, r.bareSpawn), append(spawnRatios, r.spawn/r.bareSpawn)
		rows = append(rows, []string{fmt.Sprint(i + 1), order(r.riverFirst), perSecond(r.burn), perSecond(r.river), ratio(r.burn / r.river),
			r.burnCPU.String(), r.riverCPU.String(), perSecond(r.submit), ms(r.start.p50), ms(r.start.p99), perSecond(r.start.achieved), seconds(float64(r.recovery)), perSecond(r.spawn), perSecond(r.bareSpawn)})
	}
	fmt.Fprintf(o.Out, "\nburn-down: %d no-op tasks, %d agents claiming %d at a time, %d completions in flight each; River: the same number of no-op jobs\n",
		o.Tasks, o.Agents, o.ClaimBatch, o.InFlight)
	fmt.Fprintf(o.Out, "submit → start: open-loop submissions at %d/s for %s; recovery: production timing (agent lost after 15 s without heartbeats, sweep every 1 s);\n",
		o.StartRate, o.StartFor)
	fmt.Fprintf(o.Out, "spawning: %d /bin/true tasks submitted over gRPC to the scheduler, run by a real executor agent (%d slots, its shim host serving every process) leasing through the gateway;\n",
		o.SpawnTasks, o.SpawnSlots)
	fmt.Fprintf(o.Out, "bare: as many /bin/true processes started by this process with os/exec, %d at a time, right after\n", o.SpawnSlots)
	fmt.Fprintf(o.Out, "CPU/task and CPU/job: from the start to the last completion (Taskmesh: until the views caught up), this process + Postgres, µs\n")
	table(o.Out, []string{"run", "order", "taskmesh tasks/s", "river jobs/s", "ratio", "CPU/task", "CPU/job", "submit tasks/s", "start p50", "start p99",
		"submitted/s", "recovery", "spawning tasks/s", "bare processes/s"}, rows)
	printByOrder(o.Out, runs)
	res := &TasksResult{BurnDown: burn.median(), Submit: submit.median(), River: river.median(), Ratio: ratios.median(),
		StartP50: time.Duration(p50s.median()), StartP99: time.Duration(p99s.median()), StartRate: rates.median(),
		Recovery: time.Duration(recs.median()), ProcessSpawning: spawn.median()}
	rateMet := res.StartRate >= 0.95*float64(o.StartRate)
	summary(o.Out, len(runs), [][]string{
		{"burn-down tasks/s", burn.format(perSecond), ">= 5000", verdict(res.BurnDown >= 5000)},
		{"River jobs/s", river.format(perSecond), "", ""},
		{"ratio to River (per run, both orders)", ratios.format(ratio), ">= 0.5", verdict(res.Ratio >= 0.5)},
		{"burn-down CPU per task", burnCPU.format(micros), "", ""},
		{"River CPU per job", riverCPU.format(micros), "", ""},
		{"River's CPU per job / Taskmesh's per task", cpuRatios.format(ratio), "", ""},
		{"submit tasks/s", submit.format(perSecond), "", ""},
		{"submissions/s achieved", rates.format(perSecond), fmt.Sprintf(">= %.0f", 0.95*float64(o.StartRate)), verdict(rateMet)},
		{"submit → start p50", p50s.format(millis), "", ""},
		{"submit → start p99", p99s.format(millis), "< 100 ms at that rate", verdict(rateMet && res.StartP99 < 100*time.Millisecond)},
		{"crash recovery (production timing)", recs.format(seconds), "< 30 s", verdict(res.Recovery < 30*time.Second)},
		{"process spawning tasks/s", spawn.format(perSecond), fmt.Sprintf(">= %d", SpawnTarget), verdict(res.ProcessSpawning >= SpawnTarget)},
		{"bare /bin/true processes/s", bare.format(perSecond), "", ""},
		{"spawning / bare (per run)", spawnRatios.format(ratio), "", ""},
	})
	spawnCeiling(o.Out, bare.median())
	return res
}

func order(riverFirst bool) string {
	if riverFirst {
		return "river first"
	}
	return "taskmesh first"
}

// printByOrder prints the burn-down figures separately for the runs where
// River went first and those where Taskmesh did: whichever runs second
// meets a server that has just worked (checkpoints, autovacuum, a warm
// cache).
func printByOrder(w io.Writer, runs []tasksRun) {
	for _, riverFirst := range []bool{false, true} {
		var burn, river, ratios sample
		var which []string
		for i, r := range runs {
			if r.riverFirst == riverFirst {
				burn, river, ratios = append(burn, r.burn), append(river, r.river), append(ratios, r.burn/r.river)
				which = append(which, fmt.Sprint(i+1))
			}
		}
		if len(which) == 0 {
			fmt.Fprintf(w, "%s: not measured (needs --runs 2 or more)\n", order(riverFirst))
			continue
		}
		label := "runs"
		if len(which) == 1 {
			label = "run"
		}
		fmt.Fprintf(w, "%s (%s %s): taskmesh %s tasks/s, river %s jobs/s, ratio %s\n", order(riverFirst), label, strings.Join(which, ", "),
			burn.format(perSecond), river.format(perSecond), ratios.format(ratio))
	}
}

// schedulerUnderTest is a scheduler service on its own database and topic,
// served on loopback.
type schedulerUnderTest struct {
	addr   string
	local  *grpcserver.Local // the same services, in-process
	db     string
	pool   *pgxpool.Pool
	conn   *grpc.ClientConn
	tasks  taskv1.TaskServiceClient
	leases taskv1.LeaseServiceClient
	stop   func()
	topic  string
}

func startScheduler(ctx context.Context, env *env, db string, timing scheduler.Timing) (*schedulerUnderTest, error) {
	if err := env.createDatabase(ctx, db); err != nil {
		return nil, err
	}
	return openScheduler(ctx, env, db, "bench."+db, timing)
}

// openScheduler is startScheduler on a database that exists (migrated
// here if it is not yet), publishing to topic.
func openScheduler(ctx context.Context, env *env, db, topic string, timing scheduler.Timing) (*schedulerUnderTest, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(db), Schema: scheduler.Schema, MaxConns: 48})
	if err != nil {
		return nil, err
	}
	if err := pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...); err != nil {
		pool.Close()
		return nil, err
	}
	svc, err := scheduler.New(scheduler.Config{DB: pool, Kafka: env.broker.Config(), Topic: topic, Timing: timing, Writers: 4,
		Logger: env.log.With("database", db)})
	if err != nil {
		pool.Close()
		return nil, err
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: benchToken})
	if err != nil {
		return nil, err
	}
	svc.Register(srv)
	local, err := grpcserver.NewLocal(grpcserver.Options{InternalToken: benchToken})
	if err != nil {
		return nil, err
	}
	svc.Register(local)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	go func() { defer wg.Done(); _ = svc.Run(runCtx) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		return nil, err
	}
	return &schedulerUnderTest{addr: lis.Addr().String(), local: local, db: db, pool: pool, conn: conn, tasks: taskv1.NewTaskServiceClient(conn), leases: taskv1.NewLeaseServiceClient(conn), topic: topic,
		stop: func() {
			conn.Close()
			local.Stop(0)
			cancel()
			srv.Stop()
			wg.Wait()
			pool.Close()
		}}, nil
}

// As the gateway would call: a user of tenant bench, or an agent.
func asUser(ctx context.Context) context.Context {
	return authn.Outgoing(ctx, authn.Principal{Kind: authn.KindUser, TenantID: "bench", Subject: "bench"}, benchToken)
}

// asTenant is a user of tenant ("bench" when empty).
func asTenant(ctx context.Context, tenant string) context.Context {
	if tenant == "" {
		return asUser(ctx)
	}
	return authn.Outgoing(ctx, authn.Principal{Kind: authn.KindUser, TenantID: tenant, Subject: tenant}, benchToken)
}

func asAgent(ctx context.Context, id string) context.Context {
	return authn.Outgoing(ctx, authn.Principal{Kind: authn.KindAgent, AgentID: id, Subject: id}, benchToken)
}

// burnDatabase and latencyDatabase name the databases of a run's
// burn-down and of its submit → start and recovery measurements.
func burnDatabase(run int) string    { return fmt.Sprintf("burn%d", run) }
func latencyDatabase(run int) string { return fmt.Sprintf("latency%d", run) }

// burnDown submits o.Tasks no-op tasks, then lets the agents drain them.
//
// It returns tasks/s and the CPU per task from the agents' first claim
// until the views caught up, and the submissions' tasks/s.
func burnDown(ctx context.Context, env *env, o TasksOptions, run int) (burn float64, cpu perItem, submit float64, err error) {
	s, err := startScheduler(ctx, env, burnDatabase(run), scheduler.Timing{AgentLostAfter: time.Hour})
	if err != nil {
		return 0, perItem{}, 0, err
	}
	defer s.stop()
	if o.PGStats {
		if err := pgstats.Reset(ctx, s.pool); err != nil {
			return 0, perItem{}, 0, err
		}
	}
	began := time.Now()
	if err := submitNoops(ctx, s, o.Tasks, 16); err != nil {
		return 0, perItem{}, 0, err
	}
	submit = float64(o.Tasks) / time.Since(began).Seconds()
	if o.PGStats {
		// Statistics of the burn-down alone.
		if err := pgstats.Reset(ctx, s.pool); err != nil {
			return 0, perItem{}, 0, err
		}
	}

	if o.BurnProfile != "" && run == 1 {
		f, err := os.Create(o.BurnProfile)
		if err != nil {
			return 0, perItem{}, 0, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, perItem{}, 0, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	pgData := filepath.Join(env.dir, "pg")
	start := markNow(pgData)
	var done atomic.Int64
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, o.Agents)
	for a := 0; a < o.Agents; a++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			if err := noopAgent(actx, s, id, o, &done, int64(o.Tasks)); err != nil && actx.Err() == nil {
				errs <- err
			}
		}(fmt.Sprintf("bench-agent-%d", a))
	}
	for done.Load() < int64(o.Tasks) {
		select {
		case err := <-errs:
			cancel()
			wg.Wait()
			return 0, perItem{}, 0, err
		case <-time.After(2 * time.Millisecond):
		}
	}
	cancel()
	wg.Wait()
	caught, err := waitCaughtUp(ctx, s, o.Tasks, pgData)
	if err != nil {
		return 0, perItem{}, 0, err
	}
	burn = float64(o.Tasks) / caught.at.Sub(start.at).Seconds()
	cpu = cpuPer(start, caught, o.Tasks)
	if o.PGStats {
		if err := pgstats.Print(ctx, s.pool, o.Out); err != nil {
			return 0, perItem{}, 0, err
		}
	}
	return burn, cpu, submit, nil
}

func submitNoops(ctx context.Context, s *schedulerUnderTest, n, workers int) error {
	return submitTasks(ctx, s, n, workers, func(i int64) *taskv1.TaskSpec {
		return &taskv1.TaskSpec{Name: fmt.Sprint("noop-", i), Type: "noop"}
	})
}

// submitTasks creates n tasks, spec(i) for i = 1..n, over workers
// concurrent CreateTask calls.
func submitTasks(ctx context.Context, s *schedulerUnderTest, n, workers int, spec func(i int64) *taskv1.TaskSpec) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: spec(i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// noopAgent claims batches and completes each task with its own
// CompleteTask call, InFlight at a time, as an executor does for no-ops.
func noopAgent(ctx context.Context, s *schedulerUnderTest, id string, o TasksOptions, done *atomic.Int64, total int64) error {
	actx := asAgent(ctx, id)
	sem := make(chan struct{}, o.InFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	var failed atomic.Value
	for ctx.Err() == nil && done.Load() < total {
		if err, _ := failed.Load().(error); err != nil {
			return err
		}
		resp, err := s.leases.ClaimTasks(actx, &taskv1.ClaimTasksRequest{AgentId: id, MachineId: id, Limit: int32(o.ClaimBatch),
			Types: []string{"noop"}, Wait: durationpb.New(time.Second)})
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		for _, t := range resp.GetTasks() {
			sem <- struct{}{}
			wg.Add(1)
			go func(t *taskv1.Task) {
				defer func() { <-sem; wg.Done() }()
				if _, err := s.leases.CompleteTask(actx, &taskv1.CompleteTaskRequest{TaskId: t.GetId(), AgentId: id, AttemptId: t.GetAttemptId()}); err != nil {
					failed.Store(fmt.Errorf("complete: %w", err))
					return
				}
				done.Add(1)
			}(t)
		}
	}
	return nil
}

// waitCaughtUp waits until the relay has published every event and
// task_views shows all n tasks completed, and returns when it first saw
// that, with the CPU time used until then.
//
// The polls read indexes only: the newest event's position against the
// relay's checkpoint, and the views of the aggregates of the newest 1,000
// events. The projection applies each partition in order and those
// events reach every partition, so once their views are current every
// view is. The count of completed views that confirms it reads the whole
// table (a second and more for 100,000 views, longer than many a poll's
// whole wait), so it runs once the polls pass and its own time is not
// counted. Should it find views missing, polling goes on with the count
// in every poll, and the time is taken when that passes.
func waitCaughtUp(ctx context.Context, s *schedulerUnderTest, n int, pgData string) (cpuMark, error) {
	deadline := time.Now().Add(5 * time.Minute)
	counted := false
	for {
		var unpublished, behind bool
		err := s.pool.QueryRow(ctx, `SELECT
			NOT EXISTS (SELECT 1 FROM outbox_checkpoints c WHERE c.relay = 'scheduler'
				AND (c.tx_id, c.event_id) >= (SELECT e.tx_id, e.id FROM events e ORDER BY e.tx_id DESC, e.id DESC LIMIT 1)),
			EXISTS (SELECT 1 FROM (SELECT e.aggregate_id, e.version FROM events e ORDER BY e.tx_id DESC, e.id DESC LIMIT 1000) e
				WHERE NOT EXISTS (SELECT 1 FROM task_views v WHERE v.id = e.aggregate_id AND v.version >= e.version))`).
			Scan(&unpublished, &behind)
		if err != nil {
			return cpuMark{}, err
		}
		if !unpublished && !behind {
			at := markNow(pgData)
			done, err := doneViews(ctx, s, n)
			if err != nil {
				return cpuMark{}, err
			}
			if done {
				if counted {
					at = markNow(pgData)
				}
				return at, nil
			}
			counted = true
		}
		if time.Now().After(deadline) {
			return cpuMark{}, fmt.Errorf("not caught up: unpublished events %v, views behind %v", unpublished, behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doneViews reports whether task_views shows all n tasks completed.
func doneViews(ctx context.Context, s *schedulerUnderTest, n int) (bool, error) {
	var c int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM task_views WHERE status = 'completed'`).Scan(&c); err != nil {
		return false, err
	}
	return c == n, nil
}

func ptr32(v int32) *int32 { return &v }
