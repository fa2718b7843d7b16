package ratelimit

import (
	"context"
	"sync"
	"time"
)

// sweepEvery is how many calls pass between two sweeps of rested keys.
const sweepEvery = 4096

// Memory is a Limiter whose state lives in this process. It is right for a
// single gateway replica; with several, each would allow the whole limit
// (use Redis).
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	tats  map[string]int64 // µs since the Unix epoch
	calls int
}

// NewMemory returns an in-process limiter; now is its clock (time.Now if
// nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, tats: map[string]int64{}}
}

// Allow implements Limiter. It never fails except for invalid charges.
func (m *Memory) Allow(_ context.Context, charges ...Charge) (Decision, error) {
	if err := validate(charges); err != nil {
		return Decision{}, err
	}
	ps := make([]params, len(charges))
	for i, c := range charges {
		ps[i] = paramsOf(c)
	}
	tats := make([]int64, len(charges))
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UnixMicro()
	for i, c := range charges {
		tats[i] = m.tats[c.Key]
	}
	d, next := decide(tats, now, ps)
	for i, c := range charges {
		if next != nil && next[i] > now {
			m.tats[c.Key] = next[i]
		}
	}
	m.calls++
	if m.calls%sweepEvery == 0 {
		m.sweep(now)
	}
	return d, nil
}

// sweep forgets keys that have fully rested: a missing key and a TAT in
// the past decide alike, so memory stays bounded by the keys active within
// the last Period.
func (m *Memory) sweep(now int64) {
	for k, tat := range m.tats {
		if tat <= now {
			delete(m.tats, k)
		}
	}
}

// keys returns how many keys are remembered (tests).
func (m *Memory) keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.tats)
}
