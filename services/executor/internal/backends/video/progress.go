package video

import (
	"strconv"
	"strings"
	"time"
)

// progressParser follows ffmpeg's -progress output (blocks of key=value
// lines, each ending in progress=continue or progress=end) and turns the
// encoded time into a percentage of the clip. It only ever moves forward
// and stops at 99: 100 is reported once the MP4 is complete.
type progressParser struct {
	total   time.Duration
	percent int
}

// line reads one line; it returns the new percentage when it grew.
func (p *progressParser) line(s string) (int, bool) {
	key, val, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return 0, false
	}
	next := p.percent
	switch key {
	case "out_time_us":
		us, err := strconv.ParseInt(val, 10, 64)
		if err != nil || us <= 0 || p.total <= 0 {
			return 0, false // "N/A" before the first frame
		}
		next = int(us * 100 / p.total.Microseconds())
	case "progress":
		if val == "end" {
			next = 99
		}
	default:
		return 0, false
	}
	next = min(next, 99)
	if next <= p.percent {
		return 0, false
	}
	p.percent = next
	return next, true
}
