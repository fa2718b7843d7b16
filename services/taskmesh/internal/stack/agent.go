package stack

import (
	"context"
	"os"
	"path/filepath"

	"github.com/taskmesh/taskmesh/services/executor"
)

// startAgent runs the local executor agent against the gateway's front
// door, with its own token, as a remote agent would. Its journal and task
// run directories live under DataDir/agent. Task processes run through
// shims (re-executions of this binary), so they survive a restart of dev.
func (s *Stack) startAgent() error {
	dir := filepath.Join(s.opts.DataDir, "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := executor.Config{AgentID: s.AgentID, MachineID: s.MachineID, Slots: s.opts.AgentSlots, Server: s.GRPCAddr,
		Labels: s.opts.AgentLabels,
		Token:  s.AgentToken, DataDir: dir, LocalAPIAddr: s.opts.AgentLocalAPI, Logger: s.opts.Logger.With("service", "executor"),
		// The scheduler in this process judges the agent by this timeout;
		// the agent keeps its tasks through a restart for two thirds of
		// it (the orphan grace), which is what a slow restart has.
		AgentLostAfter: s.opts.Timing.AgentLostAfter}
	s.run(func(ctx context.Context) error { return executor.Run(ctx, cfg) })
	return nil
}
