// Package executor is the Taskmesh executor agent (docs/executor.md): it pulls
// tasks from the Taskmesh LeaseService over gRPC, runs them on this machine
// through shim processes that outlive the agent, renews their leases,
// reports progress and results, and keeps a SQLite journal so that it
// survives restarts and server outages. It also serves the agent-local REST
// API (docs/api/agent-local.md).
//
// The taskmesh binary composes it: `taskmesh executor` calls Run, and
// `taskmesh executor shim ...` calls Shim.
package executor

import (
	"context"

	"github.com/taskmesh/taskmesh/services/executor/internal/agent"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/pipeline"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/video"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// DefaultLocalAPIAddr is where the agent-local API listens by default. The
// zero Config leaves the API off; command lines should default to this.
const DefaultLocalAPIAddr = agent.DefaultLocalAPIAddr

// Config configures an agent; its fields are documented on
// agent.Settings. Zero durations and sizes take the defaults noted there.
type Config = agent.Settings

// Run runs the agent until ctx is cancelled. Running tasks stay with their
// shims when it returns; a new Run on the same DataDir reattaches to them.
func Run(ctx context.Context, cfg Config) error {
	a, err := agent.New(ctx, agent.Config{Settings: cfg})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// VideoRunner returns the ffmpeg an agent with the default task types
// renders video generations with (name, or "ffmpeg" on PATH when name is
// empty), or why such an agent claims no video tasks.
func VideoRunner(name string) (string, error) { return video.FindFFmpeg(name) }

// Shim runs a task process on behalf of an agent; args are what follows
// `executor shim` on the command line. It returns the exit code. The agent
// starts it by re-executing its own binary, so the binary that calls Run
// must route `executor shim ...` here.
func Shim(args []string) int {
	if len(args) > 0 && args[0] == "video" {
		return video.Main(args[1:])
	}
	return shim.Main(args)
}

// PipelineStage runs a stage of the model-conversion pipeline on this
// machine; args are what follows `pipeline-stage` on the command line
// (`run …` as a stage task's process, or a stand-in stage program `onnx`,
// `bie`, `nef` with `--workdir DIR`). It returns the exit code; a failure's
// reason is the last line on stderr.
func PipelineStage(args []string) int { return pipeline.Main(args) }
