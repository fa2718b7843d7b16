package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/bench"
)

// recordingBenchmarks are benchmarks that record the settings they run
// with instead of measuring anything.
func recordingBenchmarks(got *[]string, names ...string) []benchmark {
	var out []benchmark
	for _, name := range names {
		f := pflag.NewFlagSet(name, pflag.ContinueOnError)
		size := f.Int(name+"-size", 1, "")
		out = append(out, benchmark{name: name, flags: f, run: func(_ context.Context, c bench.Common) error {
			*got = append(*got, fmt.Sprintf("%s runs=%d dir=%s pg-stats=%v size=%d", name, c.Runs, c.Dir, c.PGStats, *size))
			return nil
		}})
	}
	return out
}

func TestBenchSharedSettingsReachEveryBenchmark(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"all", "--runs", "5", "--dir", "/tmp/b", "--pg-stats", "--two-size", "7"}, []string{
			"one runs=5 dir=/tmp/b pg-stats=true size=1", "two runs=5 dir=/tmp/b pg-stats=true size=7"}},
		{[]string{"all"}, []string{
			"one runs=3 dir=.taskmesh/bench pg-stats=false size=1", "two runs=3 dir=.taskmesh/bench pg-stats=false size=1"}},
		{[]string{"two", "--runs", "2", "--two-size", "4"}, []string{"two runs=2 dir=.taskmesh/bench pg-stats=false size=4"}},
	}
	for _, tc := range tests {
		var got []string
		cmd := newBenchCommand(recordingBenchmarks(&got, "one", "two"))
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("bench %v: %v", tc.args, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("bench %v ran\n%q\nwant\n%q", tc.args, got, tc.want)
		}
	}
}

// `bench all` takes every benchmark's flags; one name used by two
// benchmarks would silently set only one of them.
func TestBenchFlagNamesAreUnique(t *testing.T) {
	owner := map[string]string{}
	newBenchCommand(nil).PersistentFlags().VisitAll(func(f *pflag.Flag) { owner[f.Name] = "bench" })
	for _, b := range []benchmark{eventsBenchmark(), tasksBenchmark(), gatewayBenchmark(), admissionBenchmark()} {
		b.flags.VisitAll(func(f *pflag.Flag) {
			if o, dup := owner[f.Name]; dup {
				t.Errorf("--%s belongs to %s and %s", f.Name, o, b.name)
			}
			owner[f.Name] = b.name
		})
	}
}

// Every benchmark lists the programs it runs, so that `bench check` and
// the check before each run cover it.
func TestEveryBenchmarkListsItsPrerequisites(t *testing.T) {
	for _, c := range benchCommand().Commands() {
		switch c.Name() {
		case "all", "check", "medians":
			continue
		}
		if !bench.HasRequirements(c.Name()) {
			t.Errorf("bench %s lists no prerequisites (internal/bench/prereq.go)", c.Name())
		}
	}
}

// A test binary, like a taskmesh built on its own, has no shim or stage
// worker beside it: the benchmarks say so before they run, since every
// spawned task would then re-execute the whole binary.
func TestBenchSaysWhenNoSiblingIsBesideTheBinary(t *testing.T) {
	var got []string
	cmd := newBenchCommand(recordingBenchmarks(&got, "one"))
	var stderr strings.Builder
	cmd.SetOut(io.Discard)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"one", "--runs", "1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(stderr.String(), "no taskmesh-shim or taskmesh-stage beside") || !strings.Contains(stderr.String(), "make build") {
		t.Fatalf("ran %v; stderr %q, want the note about the missing siblings", got, stderr.String())
	}
}

func TestInRootCPUCgroup(t *testing.T) {
	none := func(string) string { return "" }
	withCPU := func(string) string { return "cpuset cpu io memory pids" }
	for _, c := range []struct {
		name, proc  string
		controllers func(string) string
		want        bool
	}{
		{"v1 cpu hierarchy, root", "4:memory:/x\n1:cpu,cpuacct:/\n0::/user.slice", withCPU, true},
		{"v1 cpu hierarchy, a cgroup", "2:cpu,cpuacct:/system.slice/postgresql.service\n0::/", none, false},
		{"v2 only, root", "0::/\n", withCPU, true},
		{"v2 only, a cgroup with the cpu controller", "0::/system.slice/taskmesh.service\n", withCPU, false},
		{"v2 only, a cgroup without it", "0::/user.slice/session-1.scope\n", none, true},
		{"nothing readable", "", withCPU, true},
	} {
		if got := inRootCPUCgroup(c.proc, c.controllers); got != c.want {
			t.Errorf("%s: inRootCPUCgroup = %v, want %v", c.name, got, c.want)
		}
	}
}
