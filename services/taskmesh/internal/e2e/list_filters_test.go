package e2e

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
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
	t.Parallel()
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

// created_after and created_before take a date (YYYY-MM-DD, UTC) as the
// audit log's from and to do: created_after=D from the start of D,
// created_before=D up to the end of D (the whole day, as to=D); an RFC
// 3339 time is itself (created_before exclusive). Neither is 30005 naming
// the parameter.
func TestListTasksTakesDates(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	id := w.submit(key, map[string]any{"name": "dated", "command": "true"})
	w.waitListed(key, id)
	created, err := time.Parse(time.RFC3339Nano, fmt.Sprint(w.task(key, id)["created_at"]))
	if err != nil {
		t.Fatal(err)
	}
	created = created.UTC()
	day := func(d int) string { return created.AddDate(0, 0, d).Format(time.DateOnly) }
	at := func(d time.Duration) string { return url.QueryEscape(created.Add(d).Format(time.RFC3339Nano)) }
	for query, listed := range map[string]bool{
		"created_after=" + day(0):                                         true,
		"created_after=" + day(1):                                         false,
		"created_after=" + day(-1):                                        true,
		"created_before=" + day(0):                                        true,
		"created_before=" + day(-1):                                       false,
		"created_after=" + day(0) + "&created_before=" + day(0):           true,
		"createdAfter=" + day(1):                                          false,
		"createdBefore=" + day(0):                                         true,
		"created_after=" + at(0):                                          true,
		"created_after=" + at(time.Microsecond):                           false,
		"created_before=" + at(0):                                         false,
		"created_before=" + at(time.Microsecond):                          true,
		"created_after=" + day(0) + "&created_before=" + at(0):            false,
		"created_after=&created_before=":                                  true,
		"created_after=" + day(0) + "&type=shell&status=pending&limit=10": true,
		// The offset's "+" sent unescaped, as a browser's address bar does.
		"created_after=" + created.In(time.FixedZone("", 8*3600)).Format(time.RFC3339Nano): true,
	} {
		code, ids, _, body := w.listIDs(key, query)
		if code != 200 || slices.Contains(ids, id) != listed {
			t.Errorf("?%s: %d %v, want the task listed %v: %v", query, code, ids, listed, body)
		}
	}
	for query, param := range map[string]string{
		"created_after=2024-13-01":                     "created_after",
		"created_after=yesterday":                      "created_after",
		"created_before=2024-02-30":                    "created_before",
		"created_before=31/01/2024":                    "created_before",
		"created_after=2024-01-01&created_before=soon": "created_before",
		"createdAfter=1732000000":                      "createdAfter",
		"created_before=2024-01-31T25:00:00Z":          "created_before",
	} {
		code, _, _, body := w.listIDs(key, query)
		wantRefused(t, query, code, body, param, "neither YYYY-MM-DD nor an RFC 3339 time")
	}
	code, _, _, body := w.listIDs(key, "created_after="+day(1)+"&created_before="+day(-1))
	wantRefused(t, "a window ending before it starts", code, body, "created_after", "is after created_before")
}

// A list shows the caller's changes acknowledged before it, with no
// waiting on the client's side: a task just created is on the first
// page, a task just cancelled is in the cancelled filter
// (docs/api/tasks.md, "Lists show your writes").
func TestListsShowYourWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	for i := range 5 {
		id := w.submit(key, map[string]any{"name": fmt.Sprint("fresh-", i), "command": "true", "machine_id": "nowhere"})
		if code, ids, _, body := w.listIDs(key, "page_size=5"); code != 200 || len(ids) == 0 || ids[0] != id {
			t.Fatalf("list right after creating %s: %d %v %v", id, code, ids, body)
		}
		if code, body, _ := w.call("POST", "/api/v1/tasks/"+id+"/cancel", key, map[string]any{}); code != 200 {
			t.Fatalf("cancel %s: %d %v", id, code, body)
		}
		if code, ids, _, body := w.listIDs(key, "status=cancelled&page_size=5"); code != 200 || len(ids) == 0 || ids[0] != id {
			t.Fatalf("cancelled list right after cancelling %s: %d %v %v", id, code, ids, body)
		}
	}
}

// Pages by offset or by page number, for clients that page that way; a
// listing starts with one of page_token, offset and page, and a page
// starts at most 10000 tasks in.
func TestListTasksByOffsetAndPage(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	var ids []string // newest first
	for i := range 5 {
		ids = append([]string{w.submit(key, map[string]any{"name": fmt.Sprint("paged-", i), "command": "true",
			"machine_id": "nowhere", "group_id": "g-paged"})}, ids...)
	}
	for query, want := range map[string][]string{
		"group_id=g-paged&limit=2&offset=0":   ids[0:2],
		"group_id=g-paged&limit=2&offset=2":   ids[2:4],
		"group_id=g-paged&page_size=2&page=2": ids[2:4],
		"group_id=g-paged&page_size=2&page=3": ids[4:5],
		"group_id=g-paged&page_size=2&page=4": nil,
		"group_id=g-paged&page=1":             ids,
		"group_id=g-paged&offset=3":           ids[3:],
	} {
		if code, got, _, body := w.listIDs(key, query); code != 200 || !slices.Equal(got, want) {
			t.Errorf("?%s: %d %v %v, want %v", query, code, got, body, want)
		}
	}
	_, _, token, _ := w.listIDs(key, "group_id=g-paged&limit=2")
	for query, says := range map[string]string{
		"offset=2&page_token=" + url.QueryEscape(token): "page_token, offset and page",
		"offset=1&page=2":          "page_token, offset and page",
		"offset=10001":             "offset",
		"offset=-1":                "offset",
		"page=10000&page_size=500": "page",
		"page=abc":                 "page",
	} {
		code, _, _, body := w.listIDs(key, query)
		wantRefused(t, query, code, body, says)
	}
}
