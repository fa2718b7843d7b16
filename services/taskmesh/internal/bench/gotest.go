package bench

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// GoTestMedians reads the output of `go test -bench … -count N` and
// prints every metric of every benchmark as the median of its N runs with
// the spread, one table per package. Lines that are not benchmark results
// (goos, pkg, PASS, ok, failures) are copied through as they come.
func GoTestMedians(r io.Reader, w io.Writer) error {
	type key struct{ pkg, name string }
	var (
		pkg   string
		order []key
		units = map[key][]string{}
		runs  = map[key]map[string]sample{}
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = p
		}
		name, metrics, ok := parseBenchLine(line)
		if !ok {
			fmt.Fprintln(w, line)
			continue
		}
		k := key{pkg, name}
		if runs[k] == nil {
			order = append(order, k)
			runs[k] = map[string]sample{}
		}
		for _, m := range metrics {
			if _, seen := runs[k][m.unit]; !seen {
				units[k] = append(units[k], m.unit)
			}
			runs[k][m.unit] = append(runs[k][m.unit], m.value)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var rows [][]string
	for i, k := range order {
		if i == 0 || order[i-1].pkg != k.pkg {
			if len(rows) > 0 {
				table(w, []string{"benchmark", "metric", "median (min–max)", "runs"}, rows)
				rows = nil
			}
			fmt.Fprintf(w, "\n%s: medians of each benchmark's runs (min–max over the runs)\n", k.pkg)
		}
		for _, u := range units[k] {
			s := runs[k][u]
			rows = append(rows, []string{k.name, u, s.format(plain), fmt.Sprint(len(s))})
		}
	}
	if len(rows) > 0 {
		table(w, []string{"benchmark", "metric", "median (min–max)", "runs"}, rows)
	}
	return nil
}

// metric is one value of a benchmark result line and its unit.
type metric struct {
	value float64
	unit  string
}

// parseBenchLine splits "BenchmarkX-2  1000  523 ns/op  12 B/op" into the
// benchmark's name and its metrics (iterations left out).
func parseBenchLine(line string) (string, []metric, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", nil, false
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return "", nil, false
	}
	var out []metric
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		out = append(out, metric{v, f[i+1]})
	}
	return f[0], out, true
}

// plain formats a value as go test printed it: the shortest decimal.
func plain(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
