package e2e

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// listIDs is GET /api/v1/tasks?query as key: the status, the ids listed,
// the next page's token and the body.
func (w *world) listIDs(key, query string) (int, []string, string, map[string]any) {
	w.t.Helper()
	code, body, _ := w.call("GET", "/api/v1/tasks?"+query, key, nil)
	var ids []string
	tasks, _ := body["tasks"].([]any)
	for _, t := range tasks {
		m, _ := t.(map[string]any)
		ids = append(ids, fmt.Sprint(m["id"]))
	}
	token, _ := body["next_page_token"].(string)
	return code, ids, token, body
}

// wantRefused checks a 400 in the task envelope whose message names what.
func wantRefused(t *testing.T, query string, code int, body map[string]any, says ...string) {
	t.Helper()
	msg := fmt.Sprint(body["message"])
	if code != 400 || body["code"] != float64(30005) {
		t.Errorf("?%s: %d %v, want 400 with code 30005", query, code, body)
		return
	}
	for _, s := range says {
		if !strings.Contains(msg, s) {
			t.Errorf("?%s: message %q does not say %q", query, msg, s)
		}
	}
}

// ?type= lists the caller's tasks of one type, with the other filters and
// the pages as they are; a type no task can have is 30005 naming type and
// the types there are.
func TestListTasksFiltersByType(t *testing.T) {
	w := newWorld(t)
	key, other := w.s.DemoAPIKey, w.tenantKey("other-tenant")
	shell1 := w.submit(key, map[string]any{"name": "shell-1", "type": "shell", "command": "true", "group_id": "g-types"})
	py := w.submit(key, map[string]any{"name": "py", "type": "python", "command": "python3 -c pass", "group_id": "g-types"})
	noop := w.submit(key, map[string]any{"name": "noop", "type": "noop", "priority": 2})
	shell2 := w.submit(key, map[string]any{"name": "shell-2", "command": "true", "priority": 2})
	theirs := w.submit(other, map[string]any{"name": "their-py", "type": "python", "command": "python3 -c pass"})
	w.waitListed(key, shell2)
	w.waitListed(other, theirs)

	for query, want := range map[string][]string{
		"type=python":                                   {py},
		"type=noop":                                     {noop},
		"type=shell":                                    {shell2, shell1},
		"type=video":                                    nil,
		"type=shell&group_id=g-types":                   {shell1},
		"type=shell&priority=2":                         {shell2},
		"type=python&status=pending":                    {py},
		"type=python&status=completed":                  nil,
		"type=noop&priority=2&limit=5":                  {noop},
		"type=&group_id=g-types":                        {py, shell1},
		"type=shell&created_after=2000-01-01T00:00:00Z": {shell2, shell1},
	} {
		code, ids, token, body := w.listIDs(key, query)
		if code != 200 || !slices.Equal(ids, want) || token != "" {
			t.Errorf("?%s: %d %v (token %q), want %v: %v", query, code, ids, token, want, body)
		}
	}
	// Another tenant's python task is its own.
	if _, ids, _, _ := w.listIDs(other, "type=python"); !slices.Equal(ids, []string{theirs}) {
		t.Errorf("the other tenant's python tasks: %v", ids)
	}
	// Pages of one type.
	code, first, token, body := w.listIDs(key, "type=shell&page_size=1")
	if code != 200 || !slices.Equal(first, []string{shell2}) || token == "" {
		t.Fatalf("first page of shell tasks: %d %v %q %v", code, first, token, body)
	}
	code, second, token, body := w.listIDs(key, "type=shell&page_size=1&page_token="+url.QueryEscape(token))
	if code != 200 || !slices.Equal(second, []string{shell1}) || token != "" {
		t.Errorf("second page of shell tasks: %d %v %q %v", code, second, token, body)
	}

	for _, query := range []string{"type=bash", "type=SHELL", "type=shell,python", "type=bash&status=pending"} {
		code, _, _, body := w.listIDs(key, query)
		wantRefused(t, query, code, body, "type", "shell, python, script, noop, video")
	}
}
