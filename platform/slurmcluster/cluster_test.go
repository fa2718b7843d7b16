package slurmcluster_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/slurmcluster"
	"github.com/taskmesh/taskmesh/platform/slurmtest"
)

func TestMain(m *testing.M) { slurmtest.Main(m) }

// The shared cluster runs batch jobs where Slurm puts them: a job asking
// for more GPUs than node-a has lands on node-b, and sacct has its record.
func TestClusterRunsJobsAndAccountsForThem(t *testing.T) {
	c := slurmtest.Shared(t)
	if len(c.Nodes) != 2 || c.Nodes[0] != (slurmcluster.Node{Name: "node-a", GPUs: 2}) || c.Nodes[1] != (slurmcluster.Node{Name: "node-b", GPUs: 4}) {
		t.Fatalf("nodes = %v", c.Nodes)
	}
	out := filepath.Join(c.JobDir, "gpu3.out")
	id := strings.TrimSpace(c.Run(t, "sbatch", "--parsable", "--gres=gpu:3", "--mem=100", "-o", out,
		"--wrap", `echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"`))
	deadline := time.Now().Add(30 * time.Second)
	for {
		state := strings.TrimSpace(c.Run(t, "sacct", "-n", "-X", "-P", "-j", id, "-o", "State"))
		if state == "COMPLETED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %q after 30 s; slurmctld log:\n%s", id, state, c.Log("slurmctld.log", 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "node-b 0,1,2" {
		t.Fatalf("job output %q, want node-b with GPUs 0,1,2", got)
	}
}

// A missing script is an error that says so, not a hang; missing packages
// name the install command (the script's exit code 3).
func TestStartReportsMissingPackages(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "cluster.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'cluster.sh: missing packages: slurmd' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := slurmcluster.Start(context.Background(), slurmcluster.Options{Script: script})
	if !errors.Is(err, slurmcluster.ErrMissingPackages) || !strings.Contains(err.Error(), slurmcluster.Install) || !strings.Contains(err.Error(), "slurmd") {
		t.Fatalf("err = %v, want ErrMissingPackages with the install command", err)
	}
	_, err = slurmcluster.Start(context.Background(), slurmcluster.Options{Script: filepath.Join(dir, "absent.sh")})
	if err == nil {
		t.Fatal("a missing script started")
	}
}
