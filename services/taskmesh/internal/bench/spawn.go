package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// spawning runs o.SpawnTasks /bin/true tasks through the gateway's front
// door and a real executor agent (each process started by a shim, as in
// production) and returns tasks/s from the first submission to the last
// completion.
func spawning(ctx context.Context, env *env, o TasksOptions) (float64, error) {
	s, err := startScheduler(ctx, env, "spawn", scheduler.Timing{})
	if err != nil {
		return 0, err
	}
	defer s.stop()
	gpool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(s.db), Schema: "gateway", MaxConns: 16})
	if err != nil {
		return 0, err
	}
	defer gpool.Close()
	if err := pg.Migrate(ctx, gpool, "gateway", gateway.Migrations()); err != nil {
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
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- executor.Run(runCtx, executor.Config{AgentID: "spawn-agent", MachineID: "bench", Slots: o.SpawnSlots,
			Server: g.GRPCAddr(), Token: token, DataDir: filepath.Join(dir, "data"), ClaimWait: time.Second})
	}()
	start := time.Now()
	for i := 0; i < o.SpawnTasks; i++ {
		if _, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "true",
			Type: "shell", Command: "/bin/true"}}); err != nil {
			return 0, err
		}
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var done int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status = 'completed'`).Scan(&done); err != nil {
			return 0, err
		}
		if done == o.SpawnTasks {
			break
		}
		select {
		case err := <-agentDone:
			return 0, fmt.Errorf("the executor stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d /bin/true tasks completed", done, o.SpawnTasks)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return float64(o.SpawnTasks) / time.Since(start).Seconds(), nil
}
