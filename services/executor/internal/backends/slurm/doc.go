// Package slurm is the executor's Slurm backend (docs/slurm.md): it claims
// tasks through the lease API like an agent, but Slurm decides where and
// when they run. It talks to slurmrestd (Client: v0.0.38 and v0.0.40 and
// later, over its unix socket or by JWT) and runs each attempt in one of
// two modes:
//
//   - placement, the slurm-bridge model: a placeholder job sized from the
//     task's resources (CPUs, memory, gres gpu:N, time limit from the
//     timeout, priority and QoS from the task's priority) waits in
//     Slurm's queue; once slurmctld runs it, the task is handed to the
//     Taskmesh agent of the node Slurm chose (its machine id is the node's
//     name) through that agent's local API, with the GPUs Slurm allocated
//     as CUDA_VISIBLE_DEVICES, and followed there. The placeholder is
//     cancelled when the task ends, is cancelled or preempted.
//   - batch: the task is the job. Its argument vector is written into the
//     batch script as single-quoted words, its output comes from Slurm's
//     output files, its exit code from the job record.
//
// Job states map onto the lease API:
//
//	PENDING                                   → assigned: the lease is renewed, Slurm's reason is the progress message
//	RUNNING (SUSPENDED)                       → StartTask
//	COMPLETED                                 → completed
//	FAILED                                    → failed with the exit code
//	TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, …      → failed, the error names the state and reason
//	CANCELLED by Slurm, PREEMPTED             → preempted (preempted_by "slurm"): requeued without using a retry
//
// A cancel or preemption from the server (the heartbeat's stop list) or
// a lost lease cancels the job. State lives in Slurm: every job's comment
// names the backend, task, attempt and mode, so a restarted backend finds
// its jobs again and never submits a second job for an attempt; a small
// record per attempt (attemptStore) keeps the task itself.
//
// One listing of slurmctld's jobs per poll interval (watcher) feeds every
// attempt's follower, however many there are.
package slurm
