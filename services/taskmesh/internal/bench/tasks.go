package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
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
)

// TasksOptions configures the task burn-down benchmark.
type TasksOptions struct {
	Dir        string
	Runs       int
	Tasks      int           // no-op tasks per burn-down
	Agents     int           // concurrent agents
	ClaimBatch int           // tasks per claim
	InFlight   int           // completions in flight per agent
	Rate       int           // tasks/s of the latency run
	RateFor    time.Duration // length of the latency run
	// BurnProfile, if set, receives a CPU profile of the first burn-down
	// alone (not the submission or the peer).
	BurnProfile string
	SpawnTasks  int // /bin/true tasks run through a real executor
	SpawnSlots  int
	// PGStats prints the statements that took most of the server's time in
	// each burn-down (pg_stat_statements), for tuning.
	PGStats bool
	Out     io.Writer
}

func (o *TasksOptions) defaults() {
	if o.Runs <= 0 {
		o.Runs = 3
	}
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
	if o.Rate <= 0 {
		o.Rate = 500
	}
	if o.RateFor <= 0 {
		o.RateFor = 20 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.SpawnTasks <= 0 {
		o.SpawnTasks = 1000
	}
	if o.SpawnSlots <= 0 {
		o.SpawnSlots = 8
	}
}

// TasksResult holds the medians.
type TasksResult struct {
	BurnDown        float64 // tasks/s claimed+completed, with events in Kafka and task_views caught up
	Submit          float64 // tasks/s submitted over gRPC
	River           float64 // River jobs/s, same server
	Ratio           float64 // BurnDown / River
	StartP50        time.Duration
	StartP99        time.Duration
	Recovery        time.Duration // lost agent → task leased again, lease_ttl_sec 300
	ProcessSpawning float64       // tasks/s through the executor with /bin/true (0 when not measured)
}

const benchToken = "bench-internal-token"

// Tasks measures the scheduler: burn-down of no-op tasks through the real
// gRPC lease API (claims batched, one CompleteTask per task), counted end
// to end only once every event is in Kafka and the task_views projection
// caught up; River working the same number of no-op jobs on the same
// Postgres as the peer; submit → start latency at a fixed rate; and how
// fast a task held by an agent that stopped heartbeating runs again.
func Tasks(ctx context.Context, o TasksOptions) (*TasksResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Dir, "tasks")
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "task scheduler: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])

	var burn, submit, river []float64
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		b, s, err := burnDown(ctx, env, o, run)
		if err != nil {
			return nil, err
		}
		r, err := riverPeer(ctx, env, o.Tasks, run)
		if err != nil {
			return nil, err
		}
		burn, submit, river = append(burn, b), append(submit, s), append(river, r)
		rows = append(rows, []string{fmt.Sprint(run), fmt.Sprintf("%.0f", b), fmt.Sprintf("%.0f", r), fmt.Sprintf("%.2f", b/r), fmt.Sprintf("%.0f", s)})
	}
	fmt.Fprintf(o.Out, "\nburn-down: %d no-op tasks, %d agents claiming %d at a time, %d completions in flight each\n", o.Tasks, o.Agents, o.ClaimBatch, o.InFlight)
	table(o.Out, []string{"run", "taskmesh tasks/s", "river jobs/s", "ratio", "submit tasks/s"}, rows)

	lat, rec, err := latencyAndRecovery(ctx, env, o)
	if err != nil {
		return nil, err
	}
	spawn, err := spawning(ctx, env, o)
	if err != nil {
		return nil, err
	}
	r := &TasksResult{BurnDown: median(burn), Submit: median(submit), River: median(river),
		StartP50: percentile(lat, 50), StartP99: percentile(lat, 99), Recovery: rec, ProcessSpawning: spawn}
	r.Ratio = r.BurnDown / r.River
	fmt.Fprintf(o.Out, "\nsubmit → start at %d tasks/s for %s (%d tasks): p50 %s, p99 %s\n", o.Rate, o.RateFor, len(lat), ms(r.StartP50), ms(r.StartP99))
	fmt.Fprintf(o.Out, "lost agent → task leased to another agent (lease_ttl_sec 300, heartbeats every 5 s): %s\n", r.Recovery.Round(time.Millisecond))
	fmt.Fprintf(o.Out, "process spawning: %d /bin/true tasks through the gateway and a real executor agent (%d slots, shims): %.0f tasks/s\n",
		o.SpawnTasks, o.SpawnSlots, r.ProcessSpawning)
	fmt.Fprintf(o.Out, "\nmedians of %d runs\n", o.Runs)
	table(o.Out, []string{"measure", "value", "target", "verdict"}, [][]string{
		{"burn-down tasks/s", fmt.Sprintf("%.0f", r.BurnDown), ">= 5000", verdict(r.BurnDown >= 5000)},
		{"ratio to River", fmt.Sprintf("%.2f (River %.0f jobs/s)", r.Ratio, r.River), ">= 0.25", verdict(r.Ratio >= 0.25)},
		{"submit → start p50", ms(r.StartP50), "", ""},
		{"submit → start p99", ms(r.StartP99), "< 100 ms", verdict(r.StartP99 < 100*time.Millisecond)},
		{"crash recovery", r.Recovery.Round(time.Millisecond).String(), "< 30 s", verdict(r.Recovery < 30*time.Second)},
		{"process spawning tasks/s", fmt.Sprintf("%.0f", r.ProcessSpawning), "", ""},
	})
	return r, nil
}

// schedulerUnderTest is a scheduler service on its own database and topic,
// served on loopback.
type schedulerUnderTest struct {
	addr   string
	db     string
	pool   *pgxpool.Pool
	conn   *grpc.ClientConn
	tasks  taskv1.TaskServiceClient
	leases taskv1.LeaseServiceClient
	stop   func()
	topic  string
}

func startScheduler(ctx context.Context, env *env, db string, timing scheduler.Timing) (*schedulerUnderTest, error) {
	admin, err := pg.Open(ctx, pg.Config{URL: env.server.URL("postgres")})
	if err != nil {
		return nil, err
	}
	_, _ = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`)
	_, err = admin.Exec(ctx, `CREATE DATABASE `+db)
	admin.Close()
	if err != nil {
		return nil, err
	}
	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(db), Schema: scheduler.Schema, MaxConns: 48})
	if err != nil {
		return nil, err
	}
	if err := pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...); err != nil {
		pool.Close()
		return nil, err
	}
	topic := "bench." + db
	svc, err := scheduler.New(scheduler.Config{DB: pool, Kafka: env.broker.Config(), Topic: topic, Timing: timing, Writers: 4})
	if err != nil {
		pool.Close()
		return nil, err
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: benchToken})
	if err != nil {
		return nil, err
	}
	svc.Register(srv)
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
	return &schedulerUnderTest{addr: lis.Addr().String(), db: db, pool: pool, conn: conn, tasks: taskv1.NewTaskServiceClient(conn), leases: taskv1.NewLeaseServiceClient(conn), topic: topic,
		stop: func() { conn.Close(); cancel(); srv.Stop(); wg.Wait(); pool.Close() }}, nil
}

// As the gateway would call: a user of tenant bench, or an agent.
func asUser(ctx context.Context) context.Context {
	return authn.Outgoing(ctx, authn.Principal{Kind: authn.KindUser, TenantID: "bench", Subject: "bench"}, benchToken)
}

func asAgent(ctx context.Context, id string) context.Context {
	return authn.Outgoing(ctx, authn.Principal{Kind: authn.KindAgent, AgentID: id, Subject: id}, benchToken)
}

// burnDown submits o.Tasks no-op tasks, then lets the agents drain them.
func burnDown(ctx context.Context, env *env, o TasksOptions, run int) (burn, submit float64, err error) {
	s, err := startScheduler(ctx, env, fmt.Sprintf("burn%d", run), scheduler.Timing{AgentLostAfter: time.Hour})
	if err != nil {
		return 0, 0, err
	}
	defer s.stop()
	if o.PGStats {
		if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()`); err != nil {
			return 0, 0, err
		}
	}
	began := time.Now()
	if err := submitNoops(ctx, s, o.Tasks, 16); err != nil {
		return 0, 0, err
	}
	submit = float64(o.Tasks) / time.Since(began).Seconds()
	if o.PGStats {
		// Statistics of the burn-down alone.
		if _, err := s.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return 0, 0, err
		}
	}

	if o.BurnProfile != "" && run == 1 {
		f, err := os.Create(o.BurnProfile)
		if err != nil {
			return 0, 0, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	start := time.Now()
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
			return 0, 0, err
		case <-time.After(2 * time.Millisecond):
		}
	}
	cancel()
	wg.Wait()
	if err := waitCaughtUp(ctx, s, o.Tasks); err != nil {
		return 0, 0, err
	}
	burn = float64(o.Tasks) / time.Since(start).Seconds()
	if o.PGStats {
		if err := printStatements(ctx, s.pool, o.Out); err != nil {
			return 0, 0, err
		}
	}
	return burn, submit, nil
}

func submitNoops(ctx context.Context, s *schedulerUnderTest, n, workers int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: fmt.Sprint("noop-", i), Type: "noop"}}); err != nil {
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

// waitCaughtUp waits until the relay published every event and task_views
// shows every task completed.
func waitCaughtUp(ctx context.Context, s *schedulerUnderTest, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		// Both checks are index lookups, so polling does not slow the run.
		var unpublished, views bool
		err := s.pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM events e, outbox_checkpoints c WHERE c.relay = 'scheduler' AND (e.tx_id, e.id) > (c.tx_id, c.event_id))
			  OR NOT EXISTS (SELECT 1 FROM outbox_checkpoints WHERE relay = 'scheduler'),
			EXISTS (SELECT 1 FROM events e WHERE NOT EXISTS (
				SELECT 1 FROM task_views v WHERE v.id = e.aggregate_id AND v.version >= e.version)
				AND e.id > (SELECT coalesce(max(id), 0) - 1000 FROM events))`).Scan(&unpublished, &views)
		if err != nil {
			return err
		}
		if !unpublished && !views && doneViews(ctx, s, n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not caught up: unpublished events %v, views behind %v", unpublished, views)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doneViews reports whether task_views shows all n tasks completed.
func doneViews(ctx context.Context, s *schedulerUnderTest, n int) bool {
	var c int
	_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM task_views WHERE status = 'completed'`).Scan(&c)
	return c == n
}

// latencyAndRecovery submits at a fixed rate while long-polling agents
// start and complete each task, then measures recovery from a lost agent.
func latencyAndRecovery(ctx context.Context, env *env, o TasksOptions) ([]time.Duration, time.Duration, error) {
	s, err := startScheduler(ctx, env, "latency", scheduler.Timing{AgentLostAfter: 15 * time.Second, SweepInterval: 250 * time.Millisecond})
	if err != nil {
		return nil, 0, err
	}
	defer s.stop()
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat []time.Duration
	for a := 0; a < 4; a++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			ac := asAgent(actx, id)
			for actx.Err() == nil {
				resp, err := s.leases.ClaimTasks(ac, &taskv1.ClaimTasksRequest{AgentId: id, MachineId: id, Limit: 50, Wait: durationpb.New(5 * time.Second)})
				if err != nil {
					continue
				}
				for _, t := range resp.GetTasks() {
					st, err := s.leases.StartTask(ac, &taskv1.StartTaskRequest{TaskId: t.GetId(), AgentId: id, AttemptId: t.GetAttemptId()})
					if err != nil {
						continue
					}
					mu.Lock()
					lat = append(lat, st.GetStartedAt().AsTime().Sub(t.GetCreatedAt().AsTime()))
					mu.Unlock()
					_, _ = s.leases.CompleteTask(ac, &taskv1.CompleteTaskRequest{TaskId: t.GetId(), AgentId: id, AttemptId: t.GetAttemptId()})
				}
			}
		}(fmt.Sprintf("latency-agent-%d", a))
	}
	total := o.Rate * int(o.RateFor/time.Second)
	interval := time.Second / time.Duration(o.Rate)
	start := time.Now()
	for i := 0; i < total; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "latency", Command: "true"}}); err != nil {
			cancel()
			wg.Wait()
			return nil, 0, err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(lat)
		mu.Unlock()
		if n >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	rec, err := recovery(ctx, s)
	return lat, rec, err
}

// recovery: agent A takes a task (lease_ttl_sec 300) and stops
// heartbeating, as a SIGKILLed agent would; agent B keeps heartbeating
// every 5 s and long-polls. Returns the time from A's last sign of life
// to B holding the task.
func recovery(ctx context.Context, s *schedulerUnderTest) (time.Duration, error) {
	resp, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "victim", Command: "sleep",
		Args: []string{"3600"}, LeaseTtlSec: ptr32(300)}})
	if err != nil {
		return 0, err
	}
	id := resp.GetTask().GetId()
	a := asAgent(ctx, "doomed-agent")
	claimed, err := s.leases.ClaimTasks(a, &taskv1.ClaimTasksRequest{AgentId: "doomed-agent", MachineId: "m-doomed", Limit: 1})
	if err != nil || len(claimed.GetTasks()) != 1 {
		return 0, fmt.Errorf("doomed agent claim: %v %v", claimed, err)
	}
	t := claimed.GetTasks()[0]
	if _, err := s.leases.StartTask(a, &taskv1.StartTaskRequest{TaskId: id, AgentId: "doomed-agent", AttemptId: t.GetAttemptId()}); err != nil {
		return 0, err
	}
	if _, err := s.leases.SendHeartbeat(a, &taskv1.SendHeartbeatRequest{AgentId: "doomed-agent", MachineId: "m-doomed", AttemptIds: []string{t.GetAttemptId()}}); err != nil {
		return 0, err
	}
	died := time.Now() // last sign of life
	b := asAgent(ctx, "rescuer")
	beat := time.NewTicker(5 * time.Second)
	defer beat.Stop()
	for time.Since(died) < 2*time.Minute {
		select {
		case <-beat.C:
			_, _ = s.leases.SendHeartbeat(b, &taskv1.SendHeartbeatRequest{AgentId: "rescuer", MachineId: "m-rescuer", FreeSlots: 1})
		default:
		}
		got, err := s.leases.ClaimTasks(b, &taskv1.ClaimTasksRequest{AgentId: "rescuer", MachineId: "m-rescuer", Limit: 1, Wait: durationpb.New(time.Second)})
		if err != nil {
			return 0, err
		}
		if len(got.GetTasks()) == 1 && got.GetTasks()[0].GetId() == id {
			return time.Since(died), nil
		}
	}
	return 0, fmt.Errorf("the task was not leased again within 2 minutes")
}

func ptr32(v int32) *int32 { return &v }

// printStatements lists the statements with the most total execution time.
func printStatements(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	rows, err := pool.Query(ctx, `SELECT calls, round(total_exec_time)::bigint, round(mean_exec_time::numeric, 3)::float8, rows,
		regexp_replace(left(query, 110), '\s+', ' ', 'g')
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		var (
			calls, total, n int64
			mean            float64
			q               string
		)
		if err := rows.Scan(&calls, &total, &mean, &n, &q); err != nil {
			return err
		}
		out = append(out, []string{fmt.Sprint(calls), fmt.Sprint(total), fmt.Sprintf("%.3f", mean), fmt.Sprint(n), q})
	}
	trows, err := pool.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd,
		(SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid) FROM pg_stat_user_tables s
		WHERE n_tup_ins + n_tup_upd > 1000 ORDER BY n_tup_ins + n_tup_upd DESC`)
	if err != nil {
		return err
	}
	var tout [][]string
	for trows.Next() {
		var (
			rel                 string
			ins, upd, hot, idxs int64
		)
		if err := trows.Scan(&rel, &ins, &upd, &hot, &idxs); err != nil {
			return err
		}
		tout = append(tout, []string{rel, fmt.Sprint(ins), fmt.Sprint(upd), fmt.Sprint(hot), fmt.Sprint(idxs)})
	}
	trows.Close()
	fmt.Fprintln(w, "\ntable writes since the database was created")
	table(w, []string{"table", "inserts", "updates", "hot updates", "indexes"}, tout)
	fmt.Fprintln(w, "\nstatements by total time (pg_stat_statements)")
	table(w, []string{"calls", "total ms", "mean ms", "rows", "query"}, out)
	return rows.Err()
}
