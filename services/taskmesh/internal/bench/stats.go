// Package bench measures Taskmesh on this machine beside a physical or peer
// ceiling measured in the same run. Every figure is taken once per run and
// printed as the median of the runs with its spread (min–max).
package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Common are the settings every benchmark takes.
type Common struct {
	Dir  string // work directory on the disk under test (not tmpfs)
	Runs int    // repetitions: each figure is the median of the runs
	// PGStats loads pg_stat_statements into the server and prints the
	// statements that took most of its time (tasks, spawn, dag, admission, scale, pipeline), for
	// tuning. Off, the server runs without the extension.
	PGStats bool
	// ServiceLog, when set, is a file that receives the logs of the
	// services a benchmark runs (JSON, info level): where a figure is
	// odd, what the relays and projections did during it.
	ServiceLog string
	Out        io.Writer
}

func (c *Common) defaults() {
	if c.Dir == "" {
		c.Dir = filepath.Join(".taskmesh", "bench")
	}
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile p (0–100) of ds by nearest rank: the value at rank ⌈p·n/100⌉
// of the sorted values (the first for p = 0), so at least p% of the values
// are at or below it. 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	// The epsilon keeps p·n that is whole in decimal (99.9 × 1000) from
	// rounding up through binary representation error.
	rank := int(math.Ceil(p*float64(len(s))/100 - 1e-9))
	return s[max(0, min(rank, len(s))-1)]
}

// sample is one figure taken once per run.
type sample []float64

func (s sample) median() float64 { return median(s) }

// spread is the smallest and largest value (0, 0 for none).
func (s sample) spread() (lo, hi float64) {
	if len(s) == 0 {
		return 0, 0
	}
	return slices.Min(s), slices.Max(s)
}

// format prints the median and the spread with unit: "5123 (4980–5230)".
func (s sample) format(unit func(float64) string) string {
	lo, hi := s.spread()
	return fmt.Sprintf("%s (%s–%s)", unit(s.median()), unit(lo), unit(hi))
}

// durations turns per-run durations into a sample of nanoseconds.
func durations(ds []time.Duration) sample {
	s := make(sample, len(ds))
	for i, d := range ds {
		s[i] = float64(d)
	}
	return s
}

// Units for sample.format. A ratio has three decimals: with two, a
// median of 0.897 printed as 0.90 beside its target ">= 0.9" and a FAIL.
func perSecond(x float64) string { return fmt.Sprintf("%.0f", x) }
func ratio(x float64) string     { return fmt.Sprintf("%.3f", x) }
func millis(ns float64) string   { return ms(time.Duration(ns)) }
func seconds(ns float64) string  { return fmt.Sprintf("%.1f s", time.Duration(ns).Seconds()) }
func micros(ns float64) string   { return fmt.Sprintf("%d µs", time.Duration(ns).Microseconds()) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// table prints rows under a header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) {
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(c))+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
}

// summary prints the medians of runs: one row per measure, with its
// spread, target and verdict.
func summary(w io.Writer, runs int, rows [][]string) {
	if runs == 1 {
		fmt.Fprintf(w, "\none run (a median of one; pass --runs for more)\n")
	} else {
		fmt.Fprintf(w, "\nmedians of %d runs (min–max over the runs)\n", runs)
	}
	table(w, []string{"measure", "median (min–max)", "target", "verdict"}, rows)
}

// verdict is "PASS" or "FAIL" for a target.
func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
