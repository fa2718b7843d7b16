package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// spawnSubmitters is how many CreateTask calls the spawning benchmark
// keeps in flight.
const spawnSubmitters = 8

// SpawnTarget is the /bin/true tasks per second one agent with 8 slots
// should run, services and Postgres on the same machine.
const SpawnTarget = 300

// spawnClaimAhead is how many tasks the benchmark's agent claims beyond
// its free slots per slot (--claim-ahead = 4 × slots). The window must
// cover what the slots consume during one claim's round trip: at about
// 200 tasks/s and 40–50 ms per claim under this load that is 8–10 tasks,
// so a window of one task per slot ran dry between claims and left half
// the slots idle (docs/executor.md "The spawn path").
const spawnClaimAhead = 4

// spawning submits o.SpawnTasks /bin/true tasks over gRPC straight to the
// scheduler (not through the gateway's REST front door) and lets a real
// executor agent run them: it leases through the gateway's lease API and
// starts each process through a shim, as in production. It returns tasks/s
// from the first submission to the last completion.
func spawning(ctx context.Context, env *env, o TasksOptions, run int) (float64, error) {
	s, err := startScheduler(ctx, env, fmt.Sprintf("spawn%d", run), scheduler.Timing{})
	if err != nil {
		return 0, err
	}
	defer s.stop()
	stats := o.PGStats && run == 1
	if stats {
		if err := pgstats.Reset(ctx, s.pool); err != nil {
			return 0, err
		}
	}
	gpool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(s.db), Schema: "gateway", MaxConns: 16})
	if err != nil {
		return 0, err
	}
	defer gpool.Close()
	if err := pg.Migrate(ctx, gpool, "gateway", gateway.Migrations()...); err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, err := gateway.New(runCtx, gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: s.addr,
		InternalToken: benchToken, DB: gpool, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	gwDone := make(chan struct{})
	go func() { defer close(gwDone); _ = g.Run(runCtx) }()
	defer func() { cancel(); <-gwDone }()
	_, token, err := g.Credentials().CreateAgentToken(ctx, "spawn-agent", "", nil, nil)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp(env.dir, "agent")
	if err != nil {
		return 0, err
	}
	var agentErr error
	agentStopped := make(chan struct{})
	go func() {
		defer close(agentStopped)
		agentErr = executor.Run(runCtx, executor.Config{AgentID: "spawn-agent", MachineID: "bench", Slots: o.SpawnSlots,
			Server: g.GRPCAddr(), Token: token, DataDir: filepath.Join(dir, "data"), ClaimWait: time.Second,
			ClaimAhead: spawnClaimAhead * o.SpawnSlots})
	}()
	rate, err := spawnAndWait(ctx, s, o.SpawnTasks, agentStopped)
	// The agent must be gone before the next run starts its own.
	cancel()
	<-agentStopped
	if err != nil {
		return 0, err
	}
	if agentErr != nil && !errors.Is(agentErr, context.Canceled) {
		return 0, fmt.Errorf("the executor: %w", agentErr)
	}
	if stats {
		if err := pgstats.Print(ctx, s.pool, o.Out); err != nil {
			return 0, err
		}
	}
	return rate, nil
}

// bareSpawns is the machine's own rate for the work the spawning figure
// asks of an agent, without Taskmesh: n /bin/true processes started with
// os/exec from this process, par at a time, each waited for. It is the
// spawning figure's peer, as River is the burn-down's: process creation
// costs ten times more on some machines than on others (docs/operations.md,
// "Benchmarks on one machine"), and the ratio of the two says what the
// agent's own path costs on any of them.
func bareSpawns(ctx context.Context, n, par int) (float64, error) {
	return spawnBare(ctx, "/bin/true", n, par)
}

// spawnBare starts n processes of path, par at a time.
func spawnBare(ctx context.Context, path string, n, par int) (float64, error) {
	start := time.Now()
	var (
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	slots := make(chan struct{}, par)
	for range n {
		slots <- struct{}{}
		if firstErr.Load() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if err := exec.CommandContext(ctx, path).Run(); err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, fmt.Errorf("bare %s: %w", path, *p)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// spawnAndWait submits n /bin/true tasks and waits for their completion.
// The submissions run concurrently with the agent, over several
// connections' worth of calls, so that the figure is the agent's and not
// one client's submission round trips.
func spawnAndWait(ctx context.Context, s *schedulerUnderTest, n int, agentStopped <-chan struct{}) (float64, error) {
	start := time.Now()
	submitted := make(chan error, 1)
	go func() {
		submitted <- submitTasks(ctx, s, n, spawnSubmitters, func(int64) *taskv1.TaskSpec {
			return &taskv1.TaskSpec{Name: "true", Type: "shell", Command: "/bin/true"}
		})
	}()
	if err := <-submitted; err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var done int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status = 'completed'`).Scan(&done); err != nil {
			return 0, err
		}
		if done == n {
			// The end is the last completion's commit, read back, not this
			// poll's: the poll can then be rare enough (its count reads
			// every task row) not to compete with what it measures.
			var last time.Time
			if err := s.pool.QueryRow(ctx, `SELECT max(updated_at) FROM tasks`).Scan(&last); err != nil {
				return 0, err
			}
			return float64(n) / last.Sub(start).Seconds(), nil
		}
		select {
		case <-agentStopped:
			return 0, fmt.Errorf("the executor stopped after %d of %d /bin/true tasks", done, n)
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d /bin/true tasks completed", done, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Spawn measures process spawning alone: o.SpawnTasks /bin/true tasks
// through a real executor agent (o.SpawnSlots slots), o.Runs times, each on
// a fresh database. It is the last figure of Tasks, taken without the
// burn-down, River and recovery runs before it.
func Spawn(ctx context.Context, o TasksOptions) (float64, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "spawn", nil)
	if err != nil {
		return 0, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "spawning: %d /bin/true tasks submitted over gRPC to the scheduler, run by a real executor agent (%d slots, claiming up to %d ahead, its shim host serving every process) leasing through the gateway\n",
		o.SpawnTasks, o.SpawnSlots, spawnClaimAhead*o.SpawnSlots)
	fmt.Fprintf(o.Out, "bare: the same number of /bin/true processes started by this process with os/exec, %d at a time, right after each run\n", o.SpawnSlots)
	var rates, bares, ratios sample
	for run := 1; run <= o.Runs; run++ {
		r, err := spawning(ctx, env, o, run)
		if err != nil {
			return 0, fmt.Errorf("run %d: %w", run, err)
		}
		bare, err := bareSpawns(ctx, o.SpawnTasks, o.SpawnSlots)
		if err != nil {
			return 0, fmt.Errorf("run %d: %w", run, err)
		}
		fmt.Fprintf(o.Out, "run %d: %s tasks/s, bare %s processes/s, ratio %s\n", run, perSecond(r), perSecond(bare), ratio(r/bare))
		rates, bares, ratios = append(rates, r), append(bares, bare), append(ratios, r/bare)
	}
	summary(o.Out, len(rates), [][]string{
		{"process spawning tasks/s", rates.format(perSecond), fmt.Sprintf(">= %d", SpawnTarget), verdict(rates.median() >= SpawnTarget)},
		{"bare /bin/true processes/s", bares.format(perSecond), "", ""},
		{"spawning / bare (per run)", ratios.format(ratio), "", ""},
	})
	spawnCeiling(o.Out, bares.median())
	return rates.median(), nil
}

// spawnCeiling says so when the machine itself starts fewer bare
// processes a second than the spawning target asks of an agent: every
// task is at least one process, so there the target is beyond the
// machine, whatever the agent does, and the ratio to the bare rate is
// the figure to read (docs/executor.md, "The machine's own rate beside
// it"). The verdict stays what the figure is.
func spawnCeiling(w io.Writer, bare float64) {
	if bare > 0 && bare < SpawnTarget {
		fmt.Fprintf(w, "note: this machine starts %s bare /bin/true processes/s, fewer than the %d tasks/s the spawning target asks: "+
			"the target is beyond it with or without Taskmesh; read spawning / bare\n", perSecond(bare), SpawnTarget)
	}
}
