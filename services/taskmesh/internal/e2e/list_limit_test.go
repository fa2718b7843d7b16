package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// ?limit= is another name for ?page_size= on GET /api/v1/tasks: it bounds
// the page and pages on with the token; both given must agree, and an
// out-of-range limit is refused like an out-of-range page size.
func TestListTasksTakesLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	for i := range 3 {
		w.submit(key, map[string]any{"name": fmt.Sprint("listed-", i), "type": "shell", "command": "true"})
	}
	page := func(query string) (int, []any, string, map[string]any) {
		t.Helper()
		code, body, _ := w.call("GET", "/api/v1/tasks?"+query, key, nil)
		tasks, _ := body["tasks"].([]any)
		token, _ := body["next_page_token"].(string)
		return code, tasks, token, body
	}
	waitFor(t, 20*time.Second, "the three tasks in the list", func() bool {
		_, tasks, _, _ := page("status=pending")
		return len(tasks) == 3
	})
	code, first, token, body := page("status=pending&limit=2")
	if code != 200 || len(first) != 2 || token == "" {
		t.Fatalf("?limit=2: %d, %d tasks, token %q: %v", code, len(first), token, body)
	}
	code, rest, token, body := page("status=pending&limit=2&page_token=" + url.QueryEscape(token))
	if code != 200 || len(rest) != 1 || token != "" {
		t.Fatalf("second page: %d, %d tasks, token %q: %v", code, len(rest), token, body)
	}
	if _, same, _, _ := page("status=pending&limit=2&page_size=2"); len(same) != 2 {
		t.Fatalf("?limit=2&page_size=2: %d tasks", len(same))
	}
	for query, says := range map[string]string{
		"limit=2&page_size=3": "limit and page_size",
		"limit=501":           "limit",
		"limit=-1":            "limit",
	} {
		code, _, _, body := page(query)
		if code != 400 || body["code"] != float64(30005) || !strings.Contains(fmt.Sprint(body["message"]), says) {
			t.Errorf("?%s: %d %v", query, code, body)
		}
	}
}
