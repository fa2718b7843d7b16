package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseBenchLine(t *testing.T) {
	tests := []struct {
		line    string
		name    string
		metrics []metric
		ok      bool
	}{
		{"BenchmarkMemoryAllow-2   \t 2418152\t       496.3 ns/op", "BenchmarkMemoryAllow-2", []metric{{496.3, "ns/op"}}, true},
		{"BenchmarkRedisAllow-2  20000  61234 ns/op  98000 p99-ns  12 B/op", "BenchmarkRedisAllow-2",
			[]metric{{61234, "ns/op"}, {98000, "p99-ns"}, {12, "B/op"}}, true},
		{"BenchmarkX-2 --- FAIL: boom", "", nil, false},
		{"BenchmarkX-2  notanumber  1 ns/op", "", nil, false},
		{"goos: linux", "", nil, false},
		{"PASS", "", nil, false},
		{"ok  \tgithub.com/x/y\t3.2s", "", nil, false},
	}
	for _, tc := range tests {
		name, metrics, ok := parseBenchLine(tc.line)
		if ok != tc.ok || name != tc.name || len(metrics) != len(tc.metrics) {
			t.Errorf("parseBenchLine(%q) = %q %v %v, want %q %v %v", tc.line, name, metrics, ok, tc.name, tc.metrics, tc.ok)
			continue
		}
		for i := range metrics {
			if metrics[i] != tc.metrics[i] {
				t.Errorf("parseBenchLine(%q) metric %d = %v, want %v", tc.line, i, metrics[i], tc.metrics[i])
			}
		}
	}
}

func TestGoTestMediansPrintsTheMedianOfEachBenchmarksRuns(t *testing.T) {
	in := `goos: linux
pkg: example.com/a
BenchmarkOne-2   1000   500 ns/op   7 p99-ns
BenchmarkOne-2   1000   300 ns/op   9 p99-ns
BenchmarkTwo-2   10     2 ns/op
BenchmarkOne-2   1000   400 ns/op   8 p99-ns
PASS
ok  	example.com/a	1.0s
pkg: example.com/b
BenchmarkThree-2   5   1.5 decisions/s
BenchmarkThree-2   5   2.5 decisions/s
ok  	example.com/b	1.0s
`
	var out bytes.Buffer
	if err := GoTestMedians(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := `goos: linux
pkg: example.com/a
PASS
ok  	example.com/a	1.0s
pkg: example.com/b
ok  	example.com/b	1.0s

example.com/a: medians of each benchmark's runs (min–max over the runs)
benchmark       metric  median (min–max)  runs
BenchmarkOne-2  ns/op   400 (300–500)     3
BenchmarkOne-2  p99-ns  8 (7–9)           3
BenchmarkTwo-2  ns/op   2 (2–2)           1

example.com/b: medians of each benchmark's runs (min–max over the runs)
benchmark         metric       median (min–max)  runs
BenchmarkThree-2  decisions/s  2 (1.5–2.5)       2
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
