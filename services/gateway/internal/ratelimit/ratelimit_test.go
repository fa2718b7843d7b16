package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/services/gateway/internal/redistest"
)

// step is one call of a scenario: advance the clock, then charge.
type step struct {
	advance time.Duration
	charges []Charge
	allowed bool
	retry   time.Duration   // Decision.RetryAfter
	remain  []int64         // States[i].Remaining, if not nil
	reset   []time.Duration // States[i].ResetAfter, if not nil
}

var gcraCases = []struct {
	name  string
	steps []step
}{
	{
		name: "burst then refused until one emission interval passes",
		steps: []step{
			{charges: ch("a", PerMinute(3), 1), allowed: true, remain: []int64{2}, reset: []time.Duration{20 * time.Second}},
			{charges: ch("a", PerMinute(3), 1), allowed: true, remain: []int64{1}},
			{charges: ch("a", PerMinute(3), 1), allowed: true, remain: []int64{0}, reset: []time.Duration{time.Minute}},
			{charges: ch("a", PerMinute(3), 1), allowed: false, retry: 20 * time.Second, remain: []int64{0}},
			{advance: 19 * time.Second, charges: ch("a", PerMinute(3), 1), allowed: false, retry: time.Second},
			{advance: time.Second, charges: ch("a", PerMinute(3), 1), allowed: true, remain: []int64{0}},
		},
	},
	{
		name: "a rested key gets its whole burst back",
		steps: []step{
			{charges: ch("a", PerMinute(2), 2), allowed: true, remain: []int64{0}},
			{advance: time.Minute, charges: ch("a", PerMinute(2), 2), allowed: true, remain: []int64{0}},
			{advance: 10 * time.Minute, charges: ch("a", PerMinute(2), 1), allowed: true, remain: []int64{1}},
		},
	},
	{
		name: "a cost larger than what remains waits for that many intervals",
		steps: []step{
			{charges: ch("t", PerMinute(100), 80), allowed: true, remain: []int64{20}},
			{charges: ch("t", PerMinute(100), 50), allowed: false, retry: 18 * time.Second, remain: []int64{20}},
			{charges: ch("t", PerMinute(100), 20), allowed: true, remain: []int64{0}},
			{advance: 30 * time.Second, charges: ch("t", PerMinute(100), 50), allowed: true, remain: []int64{0}},
		},
	},
	{
		name: "a cost of zero is always allowed and changes nothing",
		steps: []step{
			{charges: ch("a", PerMinute(1), 1), allowed: true},
			{charges: ch("a", PerMinute(1), 0), allowed: true, remain: []int64{0}},
			{charges: ch("a", PerMinute(1), 1), allowed: false, retry: time.Minute},
		},
	},
	{
		name: "all or nothing: the tenant refuses, the key is not charged",
		steps: []step{
			{charges: ch("tenant", PerMinute(1), 1), allowed: true},
			{
				charges: append(ch("key", PerMinute(5), 1), ch("tenant", PerMinute(1), 1)...),
				allowed: false, retry: time.Minute, remain: []int64{5, 0},
			},
			{charges: ch("key", PerMinute(5), 5), allowed: true, remain: []int64{0}},
		},
	},
	{
		name: "the longest wait of several refusals is the answer",
		steps: []step{
			{charges: append(ch("k", PerMinute(2), 2), ch("t", PerMinute(4), 4)...), allowed: true},
			{charges: append(ch("k", PerMinute(2), 1), ch("t", PerMinute(4), 2)...), allowed: false, retry: 30 * time.Second},
			{advance: 30 * time.Second, charges: append(ch("k", PerMinute(2), 1), ch("t", PerMinute(4), 2)...), allowed: true, remain: []int64{0, 0}},
		},
	},
	{
		name: "burst smaller than the rate smooths traffic",
		steps: []step{
			{charges: ch("s", Limit{Rate: 60, Period: time.Minute, Burst: 2}, 1), allowed: true, remain: []int64{1}},
			{charges: ch("s", Limit{Rate: 60, Period: time.Minute, Burst: 2}, 1), allowed: true, remain: []int64{0}},
			{charges: ch("s", Limit{Rate: 60, Period: time.Minute, Burst: 2}, 1), allowed: false, retry: time.Second},
			{advance: 500 * time.Millisecond, charges: ch("s", Limit{Rate: 60, Period: time.Minute, Burst: 2}, 1), allowed: false, retry: 500 * time.Millisecond},
			{advance: 500 * time.Millisecond, charges: ch("s", Limit{Rate: 60, Period: time.Minute, Burst: 2}, 1), allowed: true},
		},
	},
	{
		name: "keys are independent",
		steps: []step{
			{charges: ch("x", PerMinute(1), 1), allowed: true},
			{charges: ch("y", PerMinute(1), 1), allowed: true},
			{charges: ch("x", PerMinute(1), 1), allowed: false, retry: time.Minute},
		},
	},
	{
		name: "a rate that does not divide the period: seven of seven fit",
		steps: []step{
			{charges: ch("r", PerMinute(7), 1), allowed: true},
			{charges: ch("r", PerMinute(7), 1), allowed: true},
			{charges: ch("r", PerMinute(7), 1), allowed: true},
			{charges: ch("r", PerMinute(7), 1), allowed: true},
			{charges: ch("r", PerMinute(7), 1), allowed: true},
			{charges: ch("r", PerMinute(7), 1), allowed: true},
			{charges: ch("r", PerMinute(7), 1), allowed: true, remain: []int64{0}},
			{charges: ch("r", PerMinute(7), 1), allowed: false},
		},
	},
}

func ch(key string, l Limit, cost int64) []Charge {
	return []Charge{{Key: key, Limit: l, Cost: cost}}
}

// runCases runs every GCRA case against a fresh limiter from newLimiter,
// which must use the given clock.
func runCases(t *testing.T, newLimiter func(t *testing.T, c *clocktest.Fixed, prefix string) Limiter) {
	for i, tc := range gcraCases {
		t.Run(tc.name, func(t *testing.T) {
			c := clocktest.NewFixed(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			l := newLimiter(t, c, fmt.Sprintf("case%d:", i))
			for j, s := range tc.steps {
				c.Advance(s.advance)
				d, err := l.Allow(context.Background(), s.charges...)
				if err != nil {
					t.Fatalf("step %d: %v", j, err)
				}
				if d.Allowed != s.allowed {
					t.Fatalf("step %d: allowed = %v, want %v (%+v)", j, d.Allowed, s.allowed, d)
				}
				if s.retry != 0 && d.RetryAfter != s.retry {
					t.Errorf("step %d: retry after = %s, want %s", j, d.RetryAfter, s.retry)
				}
				if d.Allowed && d.RetryAfter != 0 {
					t.Errorf("step %d: allowed with retry after %s", j, d.RetryAfter)
				}
				if len(d.States) != len(s.charges) {
					t.Fatalf("step %d: %d states for %d charges", j, len(d.States), len(s.charges))
				}
				for k, want := range s.remain {
					if got := d.States[k].Remaining; got != want {
						t.Errorf("step %d: charge %d remaining = %d, want %d", j, k, got, want)
					}
				}
				for k, want := range s.reset {
					if got := d.States[k].ResetAfter; got != want {
						t.Errorf("step %d: charge %d reset after = %s, want %s", j, k, got, want)
					}
				}
			}
		})
	}
}

// prefixed gives every charge's key a prefix, so that cases sharing one
// Redis server do not see each other's keys.
type prefixed struct {
	Limiter
	prefix string
}

func (p prefixed) Allow(ctx context.Context, charges ...Charge) (Decision, error) {
	cs := make([]Charge, len(charges))
	for i, c := range charges {
		c.Key = p.prefix + c.Key
		cs[i] = c
	}
	return p.Limiter.Allow(ctx, cs...)
}

func TestMemoryGCRA(t *testing.T) {
	runCases(t, func(_ *testing.T, c *clocktest.Fixed, _ string) Limiter { return NewMemory(c.Now) })
}

func TestRedisGCRA(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	runCases(t, func(_ *testing.T, c *clocktest.Fixed, prefix string) Limiter {
		return prefixed{NewRedis(client, c.Now), prefix}
	})
}

func TestInvalidCharges(t *testing.T) {
	srv := redistest.Start(t)
	limiters := map[string]Limiter{"memory": NewMemory(nil), "redis": NewRedis(srv.Client(t), nil)}
	bad := []Charge{
		{Key: "", Limit: PerMinute(1), Cost: 1},
		{Key: "k", Limit: PerMinute(0), Cost: 0},
		{Key: "k", Limit: Limit{Rate: 1, Period: 0, Burst: 1}, Cost: 1},
		{Key: "k", Limit: Limit{Rate: 1, Period: time.Second, Burst: 0}, Cost: 0},
		{Key: "k", Limit: Limit{Rate: 2_000_000, Period: time.Second, Burst: 1}, Cost: 1},
		{Key: "k", Limit: PerMinute(5), Cost: -1},
		{Key: "k", Limit: PerMinute(5), Cost: 6},
	}
	for name, l := range limiters {
		for _, c := range bad {
			// A valid charge next to the bad one must not be made either.
			ok := Charge{Key: "valid", Limit: PerMinute(1), Cost: 1}
			if _, err := l.Allow(context.Background(), ok, c); !errors.Is(err, ErrInvalidCharge) {
				t.Errorf("%s: Allow(%+v) = %v, want ErrInvalidCharge", name, c, err)
			}
		}
		d, err := l.Allow(context.Background(), Charge{Key: "valid", Limit: PerMinute(1), Cost: 1})
		if err != nil || !d.Allowed {
			t.Errorf("%s: the valid charge was made by a refused call: %+v, %v", name, d, err)
		}
	}
}

func TestRedisKeyExpiresWhenRested(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	l := NewRedis(client, nil)
	ctx := context.Background()
	if _, err := l.Allow(ctx, Charge{Key: "e", Limit: PerMinute(60), Cost: 30}); err != nil {
		t.Fatal(err)
	}
	ttl, err := client.PTTL(ctx, "e").Result()
	if err != nil {
		t.Fatal(err)
	}
	// 30 of 60 per minute rest in 30 s.
	if ttl <= 29*time.Second || ttl > 30*time.Second {
		t.Errorf("TTL = %s, want about 30s", ttl)
	}
}

func TestRedisUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	srv.Stop()
	_, err := NewRedis(client, nil).Allow(context.Background(), Charge{Key: "k", Limit: PerMinute(1), Cost: 1})
	if err == nil || errors.Is(err, ErrInvalidCharge) {
		t.Fatalf("Allow with the server down = %v, want a store error", err)
	}
}

// TestRedisSharedByReplicas: two limiters on one server (two gateway
// replicas) allow the limit once in total.
func TestRedisSharedByReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := NewRedis(srv.Client(t), nil), NewRedis(srv.Client(t), nil)
	var allowed int
	for i := range 20 {
		l := a
		if i%2 == 1 {
			l = b
		}
		d, err := l.Allow(context.Background(), Charge{Key: "shared", Limit: PerMinute(10), Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Errorf("allowed %d of 20 across two replicas, want 10", allowed)
	}
}

func TestMemorySweepsRestedKeys(t *testing.T) {
	c := clocktest.NewFixed(time.Unix(1000, 0))
	m := NewMemory(c.Now)
	for i := range sweepEvery - 1 {
		if _, err := m.Allow(context.Background(), Charge{Key: fmt.Sprint("k", i), Limit: PerMinute(1), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.keys(); n != sweepEvery-1 {
		t.Fatalf("%d keys remembered, want %d", n, sweepEvery-1)
	}
	c.Advance(time.Minute)
	if _, err := m.Allow(context.Background(), Charge{Key: "last", Limit: PerMinute(1), Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if n := m.keys(); n != 1 {
		t.Errorf("%d keys after the sweep, want 1 (only the one charged now)", n)
	}
}

func BenchmarkMemoryAllow(b *testing.B) {
	m := NewMemory(nil)
	charges := benchCharges()
	ctx := context.Background()
	b.ReportAllocs()
	benchDecisions(b, func() error { _, err := m.Allow(ctx, charges...); return err })
}

func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	r := NewRedis(srv.Client(b), nil)
	charges := benchCharges()
	ctx := context.Background()
	b.ReportAllocs()
	benchDecisions(b, func() error { _, err := r.Allow(ctx, charges...); return err })
}

// benchDecisions times every decision and reports its p99 ("p99-ns"), the
// figure the limiter's cost is judged by, besides the mean (ns/op).
func benchDecisions(b *testing.B, decide func() error) {
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		began := time.Now()
		if err := decide(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(began))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// benchCharges are a request's usual four charges (key and tenant, RPM
// and TPM) with limits high enough never to refuse.
func benchCharges() []Charge {
	big := PerMinute(1_000_000)
	return []Charge{
		{Key: "rl:{t}:k:rpm", Limit: big, Cost: 1},
		{Key: "rl:{t}:k:tpm", Limit: big, Cost: 0},
		{Key: "rl:{t}:rpm", Limit: big, Cost: 1},
		{Key: "rl:{t}:tpm", Limit: big, Cost: 0},
	}
}
