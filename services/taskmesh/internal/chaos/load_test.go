package chaos

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// The GPU kinds, conversion jobs, video generations and stubborn tasks
// arrive at most at their bounds whatever the rate, and below the bounds
// the mix is the table's, draw for draw.
func TestBoundedWorkArrivesNoFasterThanItsQueuesServe(t *testing.T) {
	const draws = 200_000
	mixOf := func(rate int) map[string]int {
		l := &load{rate: rate, mix: rand.New(rand.NewSource(1))}
		got := map[string]int{}
		for range draws {
			got[l.newRequest().kind]++
		}
		return got
	}
	for _, tc := range []struct {
		rate int
		want map[string]float64 // requests a second
	}{
		{rate: 10, want: map[string]float64{"gpu": 0.3, "gpu-queue": 0.2, "pipeline": 0.2, "video": 0.1, "stubborn": 0.3}},
		{rate: 50, want: map[string]float64{"gpu": 0.5, "gpu-queue": 0.3, "pipeline": 0.3, "video": 0.1, "stubborn": 1}},
		{rate: 200, want: map[string]float64{"gpu": 0.5, "gpu-queue": 0.3, "pipeline": 0.3, "video": 0.1, "stubborn": 1}},
	} {
		got := mixOf(tc.rate)
		for kind, want := range tc.want {
			// A binomial count: within three standard deviations of
			// what the rate gives.
			expected := want / float64(tc.rate) * draws
			if math.Abs(float64(got[kind])-expected) > 3*math.Sqrt(expected) {
				t.Errorf("rate %d: %s arrives at %.3f/s, want %.3f/s", tc.rate, kind, float64(got[kind])/draws*float64(tc.rate), want)
			}
		}
		total := 0
		for _, n := range got {
			total += n
		}
		if total != draws {
			t.Errorf("rate %d: %d requests of %d draws", tc.rate, total, draws)
		}
	}
	// Below the bounds nothing is redrawn: the same seed gives the same
	// kinds as the table alone.
	l := &load{rate: 10, mix: rand.New(rand.NewSource(7))}
	ref := rand.New(rand.NewSource(7))
	for i := range 10_000 {
		w := ref.Intn(100)
		want := kinds[0].name
		for _, k := range kinds {
			if w < k.weight {
				want = k.name
				break
			}
			w -= k.weight
		}
		if got := l.newRequest().kind; got != want {
			t.Fatalf("draw %d at rate 10: %s, the table gives %s", i, got, want)
		}
	}
}

// The load's schedule is open-loop: request n is due n/rate after the
// start, so a driver woken late makes every request it owes at once.
func TestDueRequestsFollowTheClock(t *testing.T) {
	for _, c := range []struct {
		elapsed time.Duration
		rate    int
		want    int
	}{
		{0, 50, 1},
		{19 * time.Millisecond, 50, 1},
		{20 * time.Millisecond, 50, 2},
		{time.Second, 50, 51},
		{10 * time.Minute, 50, 30001},
		{1500 * time.Millisecond, 1, 2},
		{10 * time.Minute, 10000, 6_000_001},
	} {
		if got := dueRequests(c.elapsed, c.rate); got != c.want {
			t.Errorf("dueRequests(%s, %d) = %d, want %d", c.elapsed, c.rate, got, c.want)
		}
	}
}
