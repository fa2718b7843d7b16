// Command taskmesh-shim is the executor's shim on its own: the process
// that runs tasks and outlives the agent (docs/executor.md), either one
// shim host serving all of an agent's tasks or, with --shim-per-task, one
// process per task. The agent starts it when it sits beside the taskmesh
// binary; it is small so that starting it costs little.
package main

import (
	"os"

	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

func main() { os.Exit(shim.Main(os.Args[1:])) }
