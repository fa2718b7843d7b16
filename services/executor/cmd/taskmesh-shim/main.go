// Command taskmesh-shim is the executor's per-task shim on its own: the
// process that runs one task and outlives the agent (docs/executor.md).
// The agent starts it for every task when it sits beside the taskmesh
// binary; it is small so that starting it costs little next to the task.
package main

import (
	"os"

	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

func main() { os.Exit(shim.Main(os.Args[1:])) }
