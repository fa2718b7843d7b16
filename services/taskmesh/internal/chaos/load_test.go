package chaos

import (
	"math"
	"math/rand"
	"testing"
)

// The GPU kinds and conversion jobs arrive at most at their bounds
// whatever the rate, and below the bounds the mix is the table's, draw for
// draw.
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
		rate                                int
		wantGPU, wantGPUQueue, wantPipeline float64 // requests a second
	}{
		{rate: 10, wantGPU: 0.3, wantGPUQueue: 0.2, wantPipeline: 0.2},
		{rate: 50, wantGPU: 0.5, wantGPUQueue: 0.3, wantPipeline: 0.3},
		{rate: 200, wantGPU: 0.5, wantGPUQueue: 0.3, wantPipeline: 0.3},
	} {
		got := mixOf(tc.rate)
		for kind, want := range map[string]float64{"gpu": tc.wantGPU, "gpu-queue": tc.wantGPUQueue, "pipeline": tc.wantPipeline} {
			rate := float64(got[kind]) / draws * float64(tc.rate)
			if math.Abs(rate-want) > want*0.1 { // a binomial count of about 2,000: σ ≈ 2.5%
				t.Errorf("rate %d: %s arrives at %.3f/s, want %.3f/s", tc.rate, kind, rate, want)
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
