// Package shim keeps a task's process alive independently of the agent,
// the way containerd-shim and conmon do for containers.
//
// The agent never forks a task itself. For each process task it writes a
// Spec to the attempt's run directory and has a shim serve it: by default
// its shim host (host.go), one process serving every task of the agent,
// started as `<shim command> host -socket <path>`; with ShimPerTask a shim
// of the task's own, `<shim command> serve -dir <run dir>`. Either is
// started in a session of its own and without a parent-death signal, so
// the shim and its tasks survive the agent. For each task the shim:
//
//   - makes itself a child subreaper, so the task's orphaned descendants are
//     reparented to it and reaped;
//   - spawns the task in a new process group (pgid = task pid) with the
//     Spec's argv, env and working directory; when resource limits are set
//     the task is started through `executor shim exec`, which sets
//     RLIMIT_AS/RLIMIT_CPU on itself and then execve(2)s the task, so the
//     limits hold before any task code runs;
//   - writes stdout and stderr to stdout.log and stderr.log, keeping the
//     first OutputLimit bytes and counting the rest, plus the last TailBytes
//     of each stream in stdout.tail/stderr.tail;
//   - tracks progress from `::progress::<0-100> [message]` stdout lines and
//     from the last line of the progress file (latest change wins);
//   - enforces the task timeout and stop requests: SIGTERM to the group, the
//     grace period, SIGKILL to the group;
//   - when the task's main process exits, kills what is left of its group,
//     waits until the group is empty, and writes status.json atomically
//     (temporary file, rename);
//   - serves the agent on a unix socket (newline-delimited JSON, see
//     Request and Response): "state", "stop" and "wait";
//   - stops the task with reason "orphaned" when no agent has been connected
//     for OrphanGrace, which bounds how long a task outlives its agent;
//   - stops the task with reason "fenced", and kills it FenceGrace later,
//     when the agent did not renew its Fence in time. The server leases a
//     silent agent's tasks again after about 15 s, whether the agent died,
//     was stopped or was cut off, and the fence holds in all three cases
//     and whatever the task does with SIGTERM; the orphan rule does not.
//
// A shim holds an exclusive flock on the run directory's shim.lock for its
// whole life and writes the marker file "spawned" just before it forks the
// task; a restarted agent reads both (Inspect) to tell a shim that is
// alive, a task that never started and a process whose outcome is lost
// (see lock.go).
//
// Exits are collected by one reaper per process (reaper.go), which hands
// each to the task that forked the pid and reaps the orphans.
//
// Readiness: the agent passes a pipe as file descriptor 3. The shim writes
// one JSON line to it ({"pid":N} once the task runs, or {"error":"..."} if
// it could not be started) and closes it, so Start returns only when the
// socket is listening and the task exists (or definitely does not). A
// host reports itself ready the same way, and then answers each serve
// request with that line.
package shim
