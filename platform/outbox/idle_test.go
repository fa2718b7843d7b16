package outbox

import (
	"testing"
	"time"
)

// An idle relay's wait doubles from PollInterval up to IdlePollMax, and a
// read that finds events (or a wake) starts it over.
func TestIdlePollBacksOffAndResets(t *testing.T) {
	p := idlePoll{min: 10 * time.Millisecond, max: 100 * time.Millisecond}
	var got []time.Duration
	for range 6 {
		got = append(got, p.next())
	}
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits = %v, want %v ms", got, want)
		}
	}
	p.reset()
	if d := p.next(); d != 10*time.Millisecond {
		t.Fatalf("first wait after a reset = %v, want 10ms", d)
	}
}

// The defaults keep IdlePollMax at least PollInterval, so a relay set to
// poll slowly is never made to poll faster when idle.
func TestIdlePollMaxNotBelowPollInterval(t *testing.T) {
	c := Config{PollInterval: 500 * time.Millisecond, IdlePollMax: 50 * time.Millisecond}
	c.defaults()
	if c.IdlePollMax != 500*time.Millisecond {
		t.Fatalf("IdlePollMax = %v, want 500ms", c.IdlePollMax)
	}
	c = Config{}
	c.defaults()
	if c.PollInterval != 10*time.Millisecond || c.IdlePollMax != 100*time.Millisecond {
		t.Fatalf("defaults: PollInterval %v, IdlePollMax %v", c.PollInterval, c.IdlePollMax)
	}
}
