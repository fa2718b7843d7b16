// Package slurme2e holds the end-to-end tests of the Slurm backend
// (docs/slurm.md): a whole Taskmesh (stack), a real Slurm cluster on
// loopback (platform/slurmtest, deployments/slurm/cluster.sh), a Taskmesh
// agent per Slurm node, and `executor --backend slurm` as a process of its
// own between them. The tests are the backend's acceptance: both modes,
// cancel, timeout, Slurm's placement and order, a backend killed mid-job,
// and preemption.
package slurme2e
