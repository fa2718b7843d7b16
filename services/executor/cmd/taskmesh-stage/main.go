// Command taskmesh-stage is the conversion pipeline's stage worker on its
// own: what an agent runs as each stage task's process, and the built-in
// stand-in stage programs (docs/api/pipeline.md, "Stage workers"). It does
// what `taskmesh pipeline-stage` does and takes the same arguments, with
// or without that word first, so the scheduler's worker command is
// `<binary> pipeline-stage run …` whichever binary it names. It is small
// so that a stage costs little more than its program: it starts twice per
// stage (the worker, then the stand-in as `{self}`), and the taskmesh
// binary takes over ten times its CPU to start
// (docs/decisions/0091-small-stage-worker-binary.md).
package main

import (
	"os"

	"github.com/taskmesh/taskmesh/services/executor/internal/backends/pipeline"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "pipeline-stage" {
		args = args[1:]
	}
	os.Exit(pipeline.Main(args))
}
