package throttle

import (
	"net/http"
	"testing"
	"time"
)

// The headers' values share one allocation; adding a value to one header
// must leave the others as they were.
func TestSetHeadersValuesStayApart(t *testing.T) {
	h := http.Header{}
	setHeaders(h, Usage{
		Requests: &Window{Limit: 600, Remaining: 599, ResetAfter: 1500 * time.Millisecond},
		Tokens:   &Window{Limit: 100000, Remaining: 99000, ResetAfter: 60 * time.Second},
	})
	for _, k := range []string{"X-RateLimit-Limit-Requests", "X-RateLimit-Remaining-Requests", "X-RateLimit-Reset-Requests",
		"X-RateLimit-Limit-Tokens", "X-RateLimit-Remaining-Tokens"} {
		h.Add(k, "extra")
	}
	want := map[string][]string{
		"X-RateLimit-Limit-Requests":     {"600", "extra"},
		"X-RateLimit-Remaining-Requests": {"599", "extra"},
		"X-RateLimit-Reset-Requests":     {"2", "extra"},
		"X-RateLimit-Limit-Tokens":       {"100000", "extra"},
		"X-RateLimit-Remaining-Tokens":   {"99000", "extra"},
		"X-RateLimit-Reset-Tokens":       {"60"},
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != len(v) || got[0] != v[0] || (len(v) > 1 && got[1] != v[1]) {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// Only the requests' window: three headers.
	h = http.Header{}
	setHeaders(h, Usage{Requests: &Window{Limit: 10, Remaining: 9, ResetAfter: time.Second}})
	if len(h) != 3 || h.Get("X-RateLimit-Remaining-Requests") != "9" {
		t.Errorf("requests only: %v", h)
	}
}
