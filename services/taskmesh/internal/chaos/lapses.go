package chaos

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// An agent whose calls the server answers none of for longer than its
// fence stops every task leased from the server (docs/executor.md,
// "Fencing") and logs the lapse once it is heard again. A lapse inside a
// fault — the agent cut off or stopped, Postgres or a scheduler down — is
// the fence doing its work. One with no fault in progress means a live
// agent lost its tasks because answers were slow: the machine, or a
// server path too long for it. The report counts both; neither is an
// invariant, since no guarantee is broken (the fence is the safe
// reaction), but the second is a cost to users worth watching.

// lapseMessage is the agent's log message for a lapse
// (services/executor/internal/agent/fence.go).
const lapseMessage = `msg="fence passed: the server answered none of this agent's calls for longer than the fence"`

// lapseLine reads the time and silent_for of slog's text format.
var lapseLine = regexp.MustCompile(`^time=(\S+) .* silent_for=(\S+)`)

// lapse is one agent's silence past its fence.
type lapse struct {
	agent      string
	start, end time.Time // the silence: from the last answered call's sending, to the answer that ended it
}

// readLapses returns the lapses an agent's log records (every process
// that ran under the name: the log is appended to across restarts).
func readLapses(agent, path string) ([]lapse, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []lapse
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, lapseMessage) {
			continue
		}
		m := lapseLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s: a lapse line without time or silent_for: %q", path, line)
		}
		end, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return nil, fmt.Errorf("%s: lapse time: %w", path, err)
		}
		silent, err := time.ParseDuration(m[2])
		if err != nil {
			return nil, fmt.Errorf("%s: lapse silent_for: %w", path, err)
		}
		out = append(out, lapse{agent: agent, start: end.Add(-silent), end: end})
	}
	return out, sc.Err()
}

// summarizeLapses says how many lapses there were and which had no fault
// in progress: none of the windows (each extended by slack, the time the
// deployment takes to recover) overlaps the silence.
func summarizeLapses(lapses []lapse, windows []window, slack time.Duration) string {
	if len(lapses) == 0 {
		return "none"
	}
	var lone []string
	for _, l := range lapses {
		during := false
		for _, w := range windows {
			if l.start.Before(w.end.Add(slack)) && l.end.After(w.start) {
				during = true
				break
			}
		}
		if !during {
			lone = append(lone, fmt.Sprintf("%s at %s silent %s", l.agent, l.end.UTC().Format("15:04:05.000"),
				l.end.Sub(l.start).Round(time.Millisecond)))
		}
	}
	s := fmt.Sprintf("%d, %d with no fault in progress", len(lapses), len(lone))
	if len(lone) > 0 {
		s += ": " + strings.Join(firstN(lone, 5), "; ")
	}
	return s
}

// lapses reads every agent's log and summarizes the lapses against the
// faults; a log it cannot read is said instead.
func (d *deployment) lapses(windows []window) string {
	var all []lapse
	for _, a := range d.agents {
		l, err := readLapses(a.name, a.log)
		if err != nil {
			return "unknown: " + err.Error()
		}
		all = append(all, l...)
	}
	return summarizeLapses(all, windows, outageSlack)
}
