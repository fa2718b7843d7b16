package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// Every bad input is refused at the edge in the route's own error body and
// stores nothing (docs/api/README.md, "Bad input"). The routes come from
// the OpenAPI document the gateway serves, so a route added to the protos
// joins the table without a change here. Each route gets: NUL, invalid
// UTF-8 and an over-long id in a path parameter; NUL and invalid UTF-8 in
// a query parameter and in a string of the body; a body over the limit
// (413); a body that is not JSON (415).
func TestEveryRouteRefusesBadInput(t *testing.T) {
	t.Parallel()
	// The table sends more requests than a tier's per-minute limit allows
	// (every route, eight cases, three credentials): the limits are lifted
	// so that each answer is the edge's, not the limiter's.
	unlimited := gateway.DefaultTierLimits()
	for tier := range unlimited {
		unlimited[tier] = gateway.Limits{}
	}
	w := newWorldWith(t, stack.Options{Timing: worldTiming(), RateLimits: gateway.RateLimits{Tiers: unlimited}})
	key := w.s.DemoAPIKey
	agent := w.agentToken("edge-agent")
	rawAdmin, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(rawAdmin))
	// Something to find: a task, so ids in paths name real rows too.
	id := w.submit(key, map[string]any{"name": "edge", "type": "shell", "command": "true"})
	w.waitListed(key, id)

	routes := servedRoutes(t, w)
	if len(routes) < 40 {
		t.Fatalf("only %d routes in /openapi.json", len(routes))
	}
	// The consumers (audit, usage, …) write what the setup caused a moment
	// later, from the broker: the counts are taken once they stand still,
	// before and after, so that a late row of either side is counted on it.
	before := settledTableCounts(t, w)
	checked := 0
	for _, r := range routes {
		bearer := w.credentialFor(r, id, key, agent, admin)
		for _, c := range r.badInputs(id) {
			var status int
			var body []byte
			if c.declared > 0 {
				status, body = w.declare(r.method, c.target, bearer, c.contentType, c.declared)
			} else {
				status, body = w.send(r.method, c.target, bearer, c.contentType, c.body)
			}
			if msg := checkRefusal(r.path, status, body, c.wantStatus); msg != "" {
				t.Errorf("%s %s, %s: %s", r.method, r.path, c.name, msg)
			}
			checked++
		}
	}
	checked += videoDeleteAnswersLikeGet(t, w, key)
	after := settledTableCounts(t, w)
	for table, n := range after {
		if before[table] != n {
			t.Errorf("table %s has %d rows after the refused requests, %d before", table, n, before[table])
		}
	}
	t.Logf("%d bad requests to %d routes refused; %d tables unchanged", checked, len(routes), len(after))
}

// videoDeleteAnswersLikeGet checks that a video DELETE of an id that names
// no generation of the caller answers as its GET does: 200 with UNKNOWN
// for a well-formed unknown id, 400 InvalidParameter for a malformed one.
func videoDeleteAnswersLikeGet(t *testing.T, w *world, key string) int {
	t.Helper()
	n := 0
	for _, id := range []string{"no-such-generation", strings.Repeat("a", 10000), "a%00b", "%ff", "été"} {
		gs, gb := w.send("GET", "/api/v1/video/generations/tasks/"+id, key, "", nil)
		for _, del := range []string{"/api/v1/video/generations/", "/v1/video/generations/"} {
			ds, db := w.send("DELETE", del+id, key, "", nil)
			var g, d map[string]any
			_ = json.Unmarshal(gb, &g)
			_ = json.Unmarshal(db, &d)
			if ds != gs || (gs == 200) != (taskStatusOf(g) == "UNKNOWN" && taskStatusOf(d) == "UNKNOWN") || (gs != 200 && d["code"] != g["code"]) {
				t.Errorf("video id %.20q: GET %d %s, DELETE %d %s", id, gs, gb, ds, db)
			}
			n += 2
		}
	}
	return n
}

// taskStatusOf reads the status of a video GET (data) or DELETE (output).
func taskStatusOf(body map[string]any) any {
	for _, k := range []string{"data", "output"} {
		if m, ok := body[k].(map[string]any); ok {
			return m["task_status"]
		}
	}
	return nil
}

// credentialFor is the first credential (a tenant's key, an agent token,
// an operator key) the route does not refuse as the wrong kind: the edge
// checks a caller's input once the route's kind rule admitted the caller.
// The probe is itself bad input, so it stores nothing.
func (w *world) credentialFor(r openAPIRoute, id string, bearers ...string) string {
	w.t.Helper()
	probe := r.badInputs(id)[0]
	for _, b := range bearers {
		if status, _ := w.send(r.method, probe.target, b, "", nil); status != http.StatusForbidden && status != http.StatusUnauthorized {
			return b
		}
	}
	w.t.Fatalf("%s %s: every credential is refused", r.method, r.path)
	return ""
}

// openAPIRoute is one operation of the served document.
type openAPIRoute struct {
	method, path string
	params       []string // path parameters, in order
	query        string   // a string query parameter ("" if none)
	bodyField    string   // a string field of the body ("" if none)
	multipart    bool     // the route takes an upload, not JSON
}

type badInput struct {
	name, target, contentType string
	body                      io.Reader
	// declared, when set, is a Content-Length sent without the body: a
	// huge upload is refused on its declaration.
	declared   int64
	wantStatus int
}

var pathParam = regexp.MustCompile(`\{([^}=]+)(=[^}]*)?\}`)

// badInputs are the requests every route must refuse; id fills the path
// parameters that are not under test.
func (r openAPIRoute) badInputs(id string) []badInput {
	path := func(last string) string {
		n := 0
		return pathParam.ReplaceAllStringFunc(r.path, func(string) string {
			n++
			if n == len(r.params) && last != "" {
				return last
			}
			return id
		})
	}
	query := r.query
	if query == "" {
		query = "q"
	}
	field := r.bodyField
	if field == "" {
		field = "name"
	}
	good := path("")
	out := []badInput{
		{name: "NUL in a query parameter", target: good + "?" + query + "=a%00b", wantStatus: 400},
		{name: "invalid UTF-8 in a query parameter", target: good + "?" + query + "=%ff%fe", wantStatus: 400},
		{name: "a body over the limit", target: good, contentType: "application/json", declared: 2 << 30, wantStatus: 413},
	}
	if !r.multipart {
		out = append(out,
			badInput{name: "NUL in a body string", target: good, contentType: "application/json",
				body: strings.NewReader(`{"` + field + `":"a\u0000b"}`), wantStatus: 400},
			badInput{name: "invalid UTF-8 in a body string", target: good, contentType: "application/json",
				body: strings.NewReader("{\"" + field + "\":\"a\xffb\"}"), wantStatus: 400},
			badInput{name: "a body that is not JSON", target: good, contentType: "application/xml", body: strings.NewReader(`{}`), wantStatus: 415})
		if body := bigBody(r.method, r.path); body != nil {
			out = append(out, badInput{name: "a body sent over the limit", target: good, contentType: "application/json", body: body, wantStatus: 413})
		}
	}
	if len(r.params) > 0 {
		out = append(out,
			badInput{name: "NUL in a path parameter", target: path("a%00b"), wantStatus: 400},
			badInput{name: "invalid UTF-8 in a path parameter", target: path("%ff"), wantStatus: 400},
			badInput{name: "an id over the cap", target: path(strings.Repeat("a", 10000)), wantStatus: 400})
	}
	return out
}

// bigBody is a JSON body streamed without a Content-Length, just past the
// route family's limit (1 MiB; 32 MiB on the video API, whose first frames
// may be 10 MB: docs/api/video.md), made as it is read. The gateway has to
// read up to the limit to refuse it, which under the race detector costs
// seconds of CPU per 32 MiB: the video API's stream goes to its POST
// routes only. Its GET and DELETE routes sit behind the same limit, and
// the declared-size case still covers them.
func bigBody(method, path string) io.Reader {
	limit := int64(1 << 20)
	if strings.Contains(path, "/video/") {
		if method != http.MethodPost {
			return nil
		}
		limit = 32 << 20
	}
	return io.MultiReader(strings.NewReader(`{"x":"`), io.LimitReader(xs{}, limit), strings.NewReader(`"}`))
}

// xs is an endless run of 'x'.
type xs struct{}

var xRun = bytes.Repeat([]byte("x"), 32<<10)

func (xs) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], xRun)
	}
	return n, nil
}

// checkRefusal says what is wrong with an answer, or "".
func checkRefusal(path string, status int, body []byte, want int) string {
	if status != want {
		return fmt.Sprintf("status %d, want %d (%s)", status, want, body)
	}
	var env map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Sprintf("body is not JSON: %s", body)
	}
	if strings.HasPrefix(path, "/v1/video/") || strings.HasPrefix(path, "/api/v1/video/") {
		if env["code"] != "InvalidParameter" || env["message"] == "" || env["request_id"] == "" || len(env) != 3 {
			return fmt.Sprintf("video body %s, want {code: InvalidParameter, message, request_id}", body)
		}
		return ""
	}
	if path == "/jobs" || strings.HasPrefix(path, "/jobs/") {
		wantCode := map[int]string{400: "InvalidParameter", 413: "RequestTooLarge", 415: "InvalidParameter"}[want]
		if env["code"] != wantCode || env["message"] == "" || len(env) != 2 {
			return fmt.Sprintf("pipeline body %s, want {code: %s, message}", body, wantCode)
		}
		return ""
	}
	wantCode := map[int]float64{400: 30005, 413: 413, 415: 415}[want]
	if d, ok := env["data"]; env["code"] != wantCode || env["message"] == "" || !ok || d != nil || len(env) != 3 {
		return fmt.Sprintf("body %s, want {code: %v, message, data: null}", body, wantCode)
	}
	return ""
}

// servedRoutes reads every operation of the gateway's /openapi.json.
func servedRoutes(t *testing.T, w *world) []openAPIRoute {
	t.Helper()
	resp, err := http.Get(w.s.HTTPURL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths       map[string]map[string]json.RawMessage `json:"paths"`
		Definitions map[string]struct {
			Properties map[string]struct {
				Type string `json:"type"`
			} `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var out []openAPIRoute
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				Consumes   []string `json:"consumes"`
				Parameters []struct {
					In     string `json:"in"`
					Name   string `json:"name"`
					Type   string `json:"type"`
					Schema struct {
						Ref        string `json:"$ref"`
						Properties map[string]struct {
							Type string `json:"type"`
						} `json:"properties"`
					} `json:"schema"`
				} `json:"parameters"`
			}
			if json.Unmarshal(raw, &op) != nil {
				continue // a path-level entry, not an operation
			}
			r := openAPIRoute{method: strings.ToUpper(method), path: path, multipart: slices.Contains(op.Consumes, "multipart/form-data")}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				r.params = append(r.params, m[1])
			}
			for _, p := range op.Parameters {
				switch {
				case p.In == "query" && p.Type == "string" && r.query == "":
					r.query = p.Name
				case p.In == "body":
					props := p.Schema.Properties
					if ref := strings.TrimPrefix(p.Schema.Ref, "#/definitions/"); ref != "" {
						for name, prop := range doc.Definitions[ref].Properties {
							if props == nil {
								props = map[string]struct {
									Type string `json:"type"`
								}{}
							}
							props[name] = prop
						}
					}
					names := make([]string, 0, len(props))
					for name, prop := range props {
						if prop.Type == "string" {
							names = append(names, name)
						}
					}
					sort.Strings(names)
					if len(names) > 0 {
						r.bodyField = names[0]
					}
				}
			}
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b openAPIRoute) int { return strings.Compare(a.path+a.method, b.path+b.method) })
	return out
}

// send makes one request; the body is sent as is (nil: none).
func (w *world) send(method, target, bearer, contentType string, body io.Reader) (int, []byte) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.s.HTTPURL+target, body)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// declare sends a request that declares a body of n bytes and sends none:
// the answer must come on the declaration alone.
func (w *world) declare(method, target, bearer, contentType string, n int64) (int, []byte) {
	w.t.Helper()
	u, err := url.Parse(w.s.HTTPURL + target)
	if err != nil {
		w.t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		method, u.RequestURI(), u.Host, bearer, contentType, n)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		w.t.Fatalf("%s %s declaring %d bytes: %v", method, target, n, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// tableCounts counts the rows of every table of every Taskmesh schema.
// settledTableCounts is tableCounts once it has not changed for a second
// (three equal readings half a second apart).
func settledTableCounts(t *testing.T, w *world) map[string]int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last, same := tableCounts(t, w), 0
	for same < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the row counts did not settle within 30s: %v", last)
		}
		time.Sleep(500 * time.Millisecond)
		next := tableCounts(t, w)
		if maps.Equal(next, last) {
			same++
		} else {
			last, same = next, 0
		}
	}
	return last
}

func tableCounts(t *testing.T, w *world) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	pool, err := pg.Open(ctx, pg.Config{URL: w.s.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, table := range tables {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}
