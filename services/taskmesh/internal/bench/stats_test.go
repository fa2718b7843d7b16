package bench

import (
	"bytes"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{7}, 7},
		{"odd, unsorted", []float64{9, 1, 5}, 5},
		{"even: mean of the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"repeated values", []float64{2, 2, 9}, 2},
	}
	for _, tc := range tests {
		if got := median(tc.in); got != tc.want {
			t.Errorf("%s: median(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("median reordered its input: %v", in)
	}
}

// ms1to returns 1 ms, 2 ms, … n ms in reverse order.
func ms1to(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(n-i) * time.Millisecond
	}
	return out
}

func TestPercentileTakesTheCeilingOfTheRank(t *testing.T) {
	tests := []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"none", nil, 99, 0},
		{"one value is every percentile", ms1to(1), 99, time.Millisecond},
		{"p0 is the minimum", ms1to(10), 0, time.Millisecond},
		{"p100 is the maximum", ms1to(10), 100, 10 * time.Millisecond},
		{"p50 of 3", ms1to(3), 50, 2 * time.Millisecond},
		{"p50 of 4 is the 2nd, not a mean", ms1to(4), 50, 2 * time.Millisecond},
		{"p99 of 10: rank 9.9 → 10", ms1to(10), 99, 10 * time.Millisecond},
		{"p90 of 10: rank 9 exactly", ms1to(10), 90, 9 * time.Millisecond},
		{"p91 of 10: rank 9.1 → 10", ms1to(10), 91, 10 * time.Millisecond},
		{"p99 of 100: rank 99 exactly", ms1to(100), 99, 99 * time.Millisecond},
		{"p99 of 101: rank 99.99 → 100", ms1to(101), 99, 100 * time.Millisecond},
		{"p99.9 of 1000: rank 999 exactly", ms1to(1000), 99.9, 999 * time.Millisecond},
		{"p10 of 3: rank 0.3 → 1", ms1to(3), 10, time.Millisecond},
	}
	for _, tc := range tests {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("%s: percentile(p%v of %d) = %v, want %v", tc.name, tc.p, len(tc.in), got, tc.want)
		}
	}
}

func TestSampleMedianAndSpread(t *testing.T) {
	tests := []struct {
		name         string
		in           sample
		unit         func(float64) string
		wantMedian   float64
		wantLo, want float64
		wantText     string
	}{
		{"none", nil, perSecond, 0, 0, 0, "0 (0–0)"},
		{"one run", sample{5000}, perSecond, 5000, 5000, 5000, "5000 (5000–5000)"},
		{"three runs", sample{5230, 4980, 5123}, perSecond, 5123, 4980, 5230, "5123 (4980–5230)"},
		{"ratios", sample{0.5, 0.55, 0.52, 0.48}, ratio, 0.51, 0.48, 0.55, "0.510 (0.480–0.550)"},
		// Two decimals would print 0.90 beside the target 0.9 it misses.
		{"a ratio just under its target", sample{0.897, 0.94, 0.85}, ratio, 0.897, 0.85, 0.94, "0.897 (0.850–0.940)"},
		{"durations", durations([]time.Duration{12 * time.Millisecond, 9500 * time.Microsecond, 30 * time.Millisecond}),
			millis, float64(12 * time.Millisecond), float64(9500 * time.Microsecond), float64(30 * time.Millisecond),
			"12.0 ms (9.5 ms–30.0 ms)"},
		{"seconds", durations([]time.Duration{16 * time.Second, 15200 * time.Millisecond}), seconds,
			float64(15600 * time.Millisecond), float64(15200 * time.Millisecond), float64(16 * time.Second), "15.6 s (15.2 s–16.0 s)"},
	}
	for _, tc := range tests {
		if got := tc.in.median(); got != tc.wantMedian {
			t.Errorf("%s: median = %v, want %v", tc.name, got, tc.wantMedian)
		}
		if lo, hi := tc.in.spread(); lo != tc.wantLo || hi != tc.want {
			t.Errorf("%s: spread = %v–%v, want %v–%v", tc.name, lo, hi, tc.wantLo, tc.want)
		}
		if got := tc.in.format(tc.unit); got != tc.wantText {
			t.Errorf("%s: format = %q, want %q", tc.name, got, tc.wantText)
		}
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		ok   bool
		want string
	}{{true, "PASS"}, {false, "FAIL"}} {
		if got := verdict(tc.ok); got != tc.want {
			t.Errorf("verdict(%v) = %q, want %q", tc.ok, got, tc.want)
		}
	}
}

func TestTableAlignsWideCharacters(t *testing.T) {
	var b bytes.Buffer
	table(&b, []string{"measure", "value"}, [][]string{{"submit → start p99", "1 (0–2)"}, {"x", "10"}})
	want := "measure             value\n" +
		"submit → start p99  1 (0–2)\n" +
		"x                   10\n"
	if b.String() != want {
		t.Errorf("table =\n%s\nwant\n%s", b.String(), want)
	}
}

// Each step is measured between the moments a task has, in lifecycle
// order; a task that waited in no queue has no admission, and its step
// spans it.
func TestLifecycleSteps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := map[string]map[string]time.Time{
		"queued": {"TaskSubmitted": t0, "TaskAdmitted": t0.Add(2 * time.Millisecond), "TaskLeased": t0.Add(5 * time.Millisecond),
			"answered": t0.Add(9 * time.Millisecond), "TaskStarted": t0.Add(10 * time.Millisecond)},
		"plain": {"TaskSubmitted": t0, "TaskLeased": t0.Add(3 * time.Millisecond), "answered": t0.Add(7 * time.Millisecond),
			"TaskStarted": t0.Add(8 * time.Millisecond)},
	}
	got := lifecycleSteps(at, []string{"plain", "queued"})
	want := "TaskSubmitted → TaskLeased p50 3.0 ms p99 3.0 ms; TaskSubmitted → TaskAdmitted p50 2.0 ms p99 2.0 ms; " +
		"TaskAdmitted → TaskLeased p50 3.0 ms p99 3.0 ms; TaskLeased → answered p50 4.0 ms p99 4.0 ms; " +
		"answered → TaskStarted p50 1.0 ms p99 1.0 ms"
	if got != want {
		t.Fatalf("steps:\n got %s\nwant %s", got, want)
	}
}
