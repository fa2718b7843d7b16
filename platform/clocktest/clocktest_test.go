package clocktest

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func TestFixedStandsStillUntilMoved(t *testing.T) {
	c := NewFixed(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now %v, want %v", got, t0)
	}
	time.Sleep(time.Millisecond)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("after real time passed: Now %v, want %v", got, t0)
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), t0.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("after Advance: Now %v, want %v", got, want)
	}
	c.Set(t0.Add(-time.Hour))
	if got, want := c.Now(), t0.Add(-time.Hour); !got.Equal(want) {
		t.Fatalf("after Set: Now %v, want %v", got, want)
	}
	if loc := NewFixed(t0).Now().Location(); loc != time.UTC {
		t.Errorf("location %v, want UTC", loc)
	}
}

func TestOffsetIsRealTimePlusTheOffset(t *testing.T) {
	var c Offset
	before := time.Now()
	if got := c.Now(); got.Before(before) || got.After(time.Now()) {
		t.Fatalf("zero Offset reads %v, not real time", got)
	}
	c.Advance(24 * time.Hour)
	c.Advance(time.Minute)
	before = time.Now()
	got := c.Now()
	if lo, hi := before.Add(24*time.Hour+time.Minute), time.Now().Add(24*time.Hour+time.Minute); got.Before(lo) || got.After(hi) {
		t.Fatalf("Now %v, want within [%v, %v]", got, lo, hi)
	}
}

// The code under test reads the clocks on its own goroutines while the
// test moves them (run with -race): every read sees a whole time, and no
// move is lost.
func TestConcurrentReadsAndMoves(t *testing.T) {
	fixed, offset := NewFixed(t0), &Offset{}
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 100 {
				fixed.Advance(time.Second)
				offset.Advance(time.Second)
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				if got := fixed.Now(); got.Before(t0) || got.After(t0.Add(400*time.Second)) {
					t.Errorf("Fixed read %v outside [t0, t0+400s]", got)
					return
				}
				if got := offset.Now(); got.Before(start) {
					t.Errorf("Offset read %v before the start %v", got, start)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, want := fixed.Now(), t0.Add(400*time.Second); !got.Equal(want) {
		t.Errorf("Fixed after the moves: %v, want %v", got, want)
	}
	if got := time.Until(offset.Now()); got < 399*time.Second || got > 400*time.Second {
		t.Errorf("Offset after the moves is %v ahead, want 400s", got)
	}
}
