package slurmtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
	if len(o) > 0 {
		shared.options = o[0]
	}
	shared.mainCalled.Store(true)
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "slurmtest:", err)
		}
	}
	os.Exit(code)
}

// Enable allows Shared without Main, for a TestMain that hands over to
// another helper's Main (e.g. pgtest.Main). The cluster is not stopped by
// the tests: its script stops it, and removes its directory, when the test
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
		shared.cluster, shared.err = Start(ctx, shared.options)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cluster
}
