package live

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// FuzzResumePoint feeds arbitrary Last-Event-ID headers and after_version
// parameters: nothing panics, a refusal names the field, and an accepted
// resume point is the larger of the two, never negative.
func FuzzResumePoint(f *testing.F) {
	for _, s := range [][2]string{{"", ""}, {"7", ""}, {"", "12"}, {"3", "9"}, {" 4 ", "x"}, {"-1", ""}, {"9223372036854775808", ""}, {"0x10", "1e3"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, header, query string) {
		r := httptest.NewRequest("GET", "/api/v1/tasks/t/events?after_version="+url.QueryEscape(query), nil)
		if header != "" {
			r.Header["Last-Event-Id"] = []string{header}
		}
		got, err := resumePoint(r)
		if err != nil {
			return
		}
		if got < 0 {
			t.Fatalf("resume point %d from %q, %q", got, header, query)
		}
		for _, v := range []string{r.Header.Get("Last-Event-ID"), query} {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > got {
				t.Fatalf("resume point %d below %q", got, v)
			}
		}
	})
}
