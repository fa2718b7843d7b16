// Package slurmtest gives tests a real Slurm cluster on loopback
// (platform/slurmcluster, started by deployments/slurm/cluster.sh), one
// per test package, started on first use:
//
//	func TestMain(m *testing.M) { slurmtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		c := slurmtest.Shared(t)
//		out := c.Run(t, "squeue", "-h", "-o", "%i %T")
//		…
//	}
//
// The cluster stops when the tests finish. A package whose TestMain
// belongs to another helper (pgtest.Main) calls Enable instead of Main:
// its cluster then stops, and its directory goes, as the test binary
// exits (the script stops when its standard input closes). Missing
// packages fail the test with the command that installs them; they never
// skip it.
package slurmtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/slurmcluster"
)

// Options configures the shared cluster (slurmcluster.Options).
type Options = slurmcluster.Options

// Node is a Slurm node and its GPUs.
type Node = slurmcluster.Node

// Cluster is the shared cluster, with helpers for tests.
type Cluster struct {
	*slurmcluster.Cluster
}

// Run runs a Slurm tool (squeue, sacct, sbatch, scancel, scontrol) and
// fails the test when it fails.
func (c *Cluster) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Output(ctx, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// shared is the package-global cluster, started by the first Shared call.
var shared struct {
	options    Options
	mainCalled atomic.Bool
	once       sync.Once
	cluster    *Cluster
	err        error
}

// Main runs the package's tests with o as the shared cluster's options,
// then stops the cluster if one was started, and exits with the tests'
// code. Use it from TestMain.
func Main(m *testing.M, o ...Options) {
	Enable(o...)
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "slurmtest:", err)
		}
	}
	os.Exit(code)
}

// Enable allows Shared without Main, for a TestMain that hands over to
// another helper's Main (e.g. pgtest.Main). The tests do not stop the
// cluster then: its script does, and removes its directory, when the test
// binary exits and its standard input closes.
func Enable(o ...Options) {
	if len(o) > 0 {
		shared.options = o[0]
	}
	shared.mainCalled.Store(true)
}

// Shared returns the package's cluster, starting it on first use (this
// takes a few seconds). If it cannot start, this and every later call fail
// the test with the reason, and with the install command when packages
// are missing.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if !shared.mainCalled.Load() {
		t.Fatal("slurmtest: call slurmtest.Main (or Enable) from TestMain so the shared cluster is stopped")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		c, err := slurmcluster.Start(ctx, shared.options)
		if err == nil {
			shared.cluster = &Cluster{c}
		}
		shared.err = err
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cluster
}
