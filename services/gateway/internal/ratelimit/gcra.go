// Package ratelimit implements the generic cell rate algorithm (GCRA) for
// the gateway's requests-per-minute and tokens-per-minute limits, with two
// stores of the same semantics: Memory, in the process (one gateway
// replica), and Redis, shared by every replica so that a limit holds in
// total rather than once per replica.
//
// # The algorithm
//
// A Limit of Rate units per Period with a Burst lets Burst units pass at
// once from a rested state, then Rate units per Period. GCRA keeps one
// number per key, the theoretical arrival time (TAT): the moment the key
// would be fully rested again. With the emission interval T = Period/Rate
// and the tolerance τ = T×Burst, a charge of n units at time now is allowed
// when
//
//	max(TAT, now) + n×T − τ ≤ now
//
// and then moves TAT to max(TAT, now) + n×T. Otherwise nothing changes and
// the caller may retry after max(TAT, now) + n×T − τ − now. A charge of
// more units than Burst can never be allowed; Allow refuses it as invalid.
//
// # Several limits at once
//
// A request is usually subject to several limits (its key's and its
// tenant's, requests and tokens). Allow takes them together and charges all
// or none: a request refused by its tenant's limit does not use up its
// key's. Both stores decide a call atomically (a mutex; one Lua script).
//
// Times are whole microseconds, in int64 and in Redis's Lua doubles alike
// (exact below 2^53 µs, some 285 years), so both stores compute the same
// numbers and the same table of cases tests both.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Limit is Rate units per Period on average, with up to Burst units at once.
type Limit struct {
	Rate   int64
	Period time.Duration
	Burst  int64
}

// PerMinute is n units per minute with a burst of n: a key that has rested
// for a minute may use its whole minute's allowance at once.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute, Burst: n} }

// Charge asks for Cost units of Limit under Key.
type Charge struct {
	Key   string
	Limit Limit
	Cost  int64
}

// ErrInvalidCharge is returned (wrapped) for a charge no store can decide:
// an empty key, a non-positive rate, period or burst, a rate of more than
// one unit per microsecond, a negative cost, or a cost larger than the
// burst (it could never pass).
var ErrInvalidCharge = errors.New("ratelimit: invalid charge")

// Validate returns ErrInvalidCharge, wrapped with the reason, or nil.
func (c Charge) Validate() error {
	switch {
	case c.Key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidCharge)
	case c.Limit.Rate <= 0 || c.Limit.Period < time.Microsecond || c.Limit.Burst <= 0:
		return fmt.Errorf("%w: %s: limit %d per %s with burst %d", ErrInvalidCharge, c.Key, c.Limit.Rate, c.Limit.Period, c.Limit.Burst)
	case c.Limit.Period.Microseconds() < c.Limit.Rate:
		// Times are whole microseconds: a finer emission interval would
		// round to zero and make every charge free.
		return fmt.Errorf("%w: %s: %d per %s is more than one per microsecond", ErrInvalidCharge, c.Key, c.Limit.Rate, c.Limit.Period)
	case c.Cost < 0 || c.Cost > c.Limit.Burst:
		return fmt.Errorf("%w: %s: cost %d is not within [0, burst %d]", ErrInvalidCharge, c.Key, c.Cost, c.Limit.Burst)
	}
	return nil
}

// State is where one charge's limit stands after a decision.
type State struct {
	// Remaining is how many more units would be allowed right now.
	Remaining int64
	// ResetAfter is how long until the limit is fully rested.
	ResetAfter time.Duration
	// RetryAfter is how long until this charge would fit; 0 when it fits.
	RetryAfter time.Duration
}

// Decision is the outcome of Allow.
type Decision struct {
	// Allowed says every charge was made; otherwise none was.
	Allowed bool
	// RetryAfter is, when not Allowed, the wait after which every charge
	// would fit (the longest of the States' RetryAfter).
	RetryAfter time.Duration
	// States has one entry per charge, in order: after the charges when
	// Allowed, as they were when not.
	States []State
}

// Limiter decides charges. Implementations are safe for concurrent use.
type Limiter interface {
	// Allow makes every charge or none. Errors: ErrInvalidCharge, or a
	// failure of the store (the decision is then unknown).
	Allow(ctx context.Context, charges ...Charge) (Decision, error)
}

// params are a charge's quantities in microseconds.
type params struct {
	interval  float64 // T
	increment int64   // n×T
	tolerance int64   // τ = Burst×T
}

// paramsOf rounds the increment and the tolerance down to whole
// microseconds. Down, so that charges adding up to Burst always fit a
// rested limit: a sum of floors never exceeds the floor of the sum, whereas
// rounding each increment to nearest could let 7 units of a burst of 7 add
// up to 3 µs more than the tolerance. The price is that the sustained rate
// may exceed Rate by less than a microsecond per charge.
func paramsOf(c Charge) params {
	t := float64(c.Limit.Period.Microseconds()) / float64(c.Limit.Rate)
	return params{
		interval:  t,
		increment: int64(math.Floor(t * float64(c.Cost))),
		tolerance: int64(math.Floor(t * float64(c.Limit.Burst))),
	}
}

// remainingEpsilon keeps Remaining from losing a unit to the rounding of
// a quotient that is a whole number in exact arithmetic.
const remainingEpsilon = 1e-9

// decide is GCRA over several charges at once. tats are the stored TATs
// (0 when absent), now the time, both in µs. It returns the decision and,
// when allowed, the TATs to store.
func decide(tats []int64, now int64, ps []params) (Decision, []int64) {
	d := Decision{Allowed: true, States: make([]State, len(ps))}
	next := make([]int64, len(ps))
	for i, p := range ps {
		tat := max(tats[i], now)
		next[i] = tat + p.increment
		if wait := next[i] - p.tolerance - now; wait > 0 {
			d.Allowed = false
			d.States[i].RetryAfter = micros(wait)
			d.RetryAfter = max(d.RetryAfter, d.States[i].RetryAfter)
		}
	}
	for i, p := range ps {
		// The limit stands at next when charged, at the rested-or-stored
		// TAT when not.
		at := max(tats[i], now)
		if d.Allowed {
			at = next[i]
		}
		d.States[i].ResetAfter = micros(at - now)
		d.States[i].Remaining = max(0, int64(math.Floor(float64(p.tolerance-(at-now))/p.interval+remainingEpsilon)))
	}
	if !d.Allowed {
		return d, nil
	}
	return d, next
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// validate checks every charge.
func validate(charges []Charge) error {
	for _, c := range charges {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	return nil
}
