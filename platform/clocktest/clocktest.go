// Package clocktest holds the clocks tests give the code under test in
// place of time.Now, so that the test decides when time passes.
//
// Fixed stands still until the test moves it: for code that only reads
// the time. Offset is real time plus an offset the test moves forward:
// for code that also waits on real timers and tickers, which must keep
// running while the test jumps ahead. Both may be read by the code under
// test on its own goroutines while the test moves them.
package clocktest

import (
	"sync"
	"sync/atomic"
	"time"
)

// Fixed is a clock that stands still until the test moves it.
type Fixed struct {
	mu sync.Mutex
	t  time.Time
}

// NewFixed returns a clock that reads t.
func NewFixed(t time.Time) *Fixed { return &Fixed{t: t} }

// Now returns the clock's time; pass c.Now where the code takes a
// func() time.Time.
func (c *Fixed) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock d forward.
func (c *Fixed) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Fixed) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Offset is real time plus an offset the test moves forward. The zero
// value reads real time.
type Offset struct{ offset atomic.Int64 }

// Now returns time.Now plus the offset.
func (c *Offset) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance adds d to the offset.
func (c *Offset) Advance(d time.Duration) { c.offset.Add(int64(d)) }
