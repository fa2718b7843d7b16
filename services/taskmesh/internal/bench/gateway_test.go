package bench

import (
	"fmt"
	"slices"
	"testing"
)

func TestBalancedOrderFollowsEveryPathByEveryOtherOnce(t *testing.T) {
	if got := balancedOrder(3); !slices.Equal(got, []int{0, 1, 0, 2, 1, 2}) {
		t.Fatalf("balancedOrder(3) = %v, want [0 1 0 2 1 2]", got)
	}
	for n := 2; n <= 6; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			order := balancedOrder(n)
			if len(order) != n*(n-1) {
				t.Fatalf("%d slices, want %d: %v", len(order), n*(n-1), order)
			}
			counts := make([]int, n)
			pairs := map[[2]int]int{}
			for i, v := range order {
				counts[v]++
				// Repeated, the last slice is followed by the first.
				pairs[[2]int{order[(i+len(order)-1)%len(order)], v}]++
			}
			for v, c := range counts {
				if c != n-1 {
					t.Errorf("path %d comes %d times, want %d: %v", v, c, n-1, order)
				}
			}
			for a := range n {
				for b := range n {
					want := 1
					if a == b {
						want = 0
					}
					if pairs[[2]int{a, b}] != want {
						t.Errorf("%d follows %d %d times, want %d: %v", b, a, pairs[[2]int{a, b}], want, order)
					}
				}
			}
		})
	}
	if got := balancedOrder(1); !slices.Equal(got, []int{0}) {
		t.Errorf("balancedOrder(1) = %v, want [0]", got)
	}
}
