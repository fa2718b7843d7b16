package rest

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/console"
	"github.com/taskmesh/taskmesh/services/gateway/internal/live"
)

// The repository documents its contracts in docs/ (see docs/README.md):
// every REST route, every gRPC service with its RPCs, and every event. This
// test keeps that true as the contracts grow. It collects
//
//   - the REST routes of every OpenAPI document under gen/openapi/ and of
//     the document the gateway serves at /openapi.json (which adds the
//     hand-written live stream routes);
//   - the google.api.http rules of every service under proto/, which also
//     covers the APIs no gateway document holds (the agent's local API);
//   - the gateway routes outside grpc-gateway and outside the document
//     (handWrittenRoutes below, each probed against the real handler so
//     the list cannot name a route that is not served);
//   - every gRPC service and RPC, and every event of an event envelope's
//     oneof, from proto/;
//
// and fails, saying what to add where, when docs/ does not name one. It
// also fails when a page names a route that nothing serves.

// route is a REST route as docs/api/ names it: "`METHOD /path/{param}`",
// with the path template exactly as in the OpenAPI document.
type route struct{ method, path string }

func (r route) String() string { return r.method + " " + r.path }

// protoService is a gRPC service read from a .proto file.
type protoService struct {
	fullName, short, file string
	rpcs                  []string
	routes                map[route]string // route → RPC
}

// handWrittenRoutes are the routes the gateway's HTTP handler serves
// outside the generated muxes and outside its OpenAPI document (see
// handler.ServeHTTP). They belong to no gRPC service, so any page under
// docs/api/ may name them. served tells from the handler's answer whether
// the route reached its handler rather than the "no route" envelope.
var handWrittenRoutes = []struct {
	route  route
	probe  string // the request path sent to the handler
	served func(*httptest.ResponseRecorder) bool
}{
	{route{http.MethodGet, "/healthz"}, "/healthz", func(w *httptest.ResponseRecorder) bool {
		return w.Code == http.StatusOK && strings.Contains(w.Body.String(), `"ok"`)
	}},
	{route{http.MethodGet, "/openapi.json"}, "/openapi.json", func(w *httptest.ResponseRecorder) bool {
		return w.Code == http.StatusOK && strings.Contains(w.Body.String(), `"swagger"`)
	}},
	{route{http.MethodGet, "/ui/"}, "/ui/", func(w *httptest.ResponseRecorder) bool {
		return w.Code == http.StatusOK && strings.Contains(w.Body.String(), "<script")
	}},
	{route{http.MethodGet, "/metrics"}, "/metrics", func(w *httptest.ResponseRecorder) bool {
		return w.Code == http.StatusOK && w.Header().Get(metricsMarker) == "1"
	}},
	{route{http.MethodGet, "/objects/{key}"}, "/objects/results/t/a.json", reachedObjects},
	{route{http.MethodPut, "/objects/{key}"}, "/objects/results/t/a.json", reachedObjects},
}

// objectsMarker is set by the stand-in object store handler, metricsMarker
// by the stand-in metrics handler.
const (
	objectsMarker = "X-Docs-Test-Objects"
	metricsMarker = "X-Docs-Test-Metrics"
)

func reachedObjects(w *httptest.ResponseRecorder) bool { return w.Header().Get(objectsMarker) == "1" }

func TestDocsNameEveryRouteServiceAndEvent(t *testing.T) {
	root := repoRoot(t)
	services := readProtoServices(t, filepath.Join(root, "proto"))
	owners := collectRoutes(t, root, services)
	pages := readPages(t, filepath.Join(root, "docs", "api"))
	home := serviceHomes(t, services, pages)
	rpcs := checkRPCs(t, services, home)
	checks := checkRoutes(t, owners, services, home, pages)
	events := checkEvents(t, root)
	t.Logf("docs/ names %d REST routes (%d route-page checks), %d gRPC services with %d RPCs, and %d events",
		len(owners), checks, len(services), rpcs, events)
}

// routeOwners maps every REST route to the full names of the services
// whose pages must name it ("" = any page under docs/api/) and, for each,
// where the route was found.
type routeOwners map[route]map[string][]string

func (o routeOwners) add(r route, service, source string) {
	if o[r] == nil {
		o[r] = map[string][]string{}
	}
	if !slices.Contains(o[r][service], source) {
		o[r][service] = append(o[r][service], source)
	}
}

// collectRoutes gathers the routes of the OpenAPI documents, the served
// document, the protos' http rules and the hand-written gateway routes.
// An OpenAPI operation belongs to the service its operation id starts
// with ("TaskService_GetTask"); the live stream routes are tagged the same
// way.
func collectRoutes(t *testing.T, root string, services []*protoService) routeOwners {
	t.Helper()
	byShort := map[string]*protoService{}
	ambiguous := map[string]bool{}
	for _, s := range services {
		if byShort[s.short] != nil || ambiguous[s.short] {
			ambiguous[s.short] = true
			delete(byShort, s.short) // such routes may be named on any page
			continue
		}
		byShort[s.short] = s
	}
	ownerOf := func(operationID string) string {
		short, _, _ := strings.Cut(operationID, "_")
		if s := byShort[short]; s != nil {
			return s.fullName
		}
		return ""
	}
	owners := routeOwners{}
	generated, _ := filepath.Glob(filepath.Join(root, "gen", "openapi", "*.json"))
	if len(generated) == 0 {
		t.Fatal("no OpenAPI documents under gen/openapi/")
	}
	for _, path := range generated {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for r, op := range openAPIRoutes(t, rel, b) {
			owners.add(r, ownerOf(op), rel)
		}
	}
	handler := docsTestHandler(t)
	for r, op := range openAPIRoutes(t, "/openapi.json", get(t, handler, http.MethodGet, "/openapi.json").Body.Bytes()) {
		owners.add(r, ownerOf(op), "the gateway's /openapi.json")
	}
	for _, s := range services {
		for r := range s.routes {
			owners.add(r, s.fullName, s.file)
		}
	}
	for _, hw := range handWrittenRoutes {
		if w := get(t, handler, hw.route.method, hw.probe); !hw.served(w) {
			t.Errorf("the gateway no longer serves %s (%s %s answered %d %s): update handWrittenRoutes in docs_routes_test.go and docs/api/",
				hw.route, hw.route.method, hw.probe, w.Code, strings.TrimSpace(w.Body.String()))
		}
		owners.add(hw.route, "", "the gateway's HTTP handler (handler.go)")
	}
	return owners
}

// serviceHomes finds each service's home: the one page with a heading
// naming its full name, where its RPCs and routes are documented.
func serviceHomes(t *testing.T, services []*protoService, pages []*page) map[string]*page {
	t.Helper()
	home := map[string]*page{}
	for _, s := range services {
		var homes []*page
		for _, p := range pages {
			if p.headingNames(s.fullName) {
				homes = append(homes, p)
			}
		}
		switch len(homes) {
		case 1:
			home[s.fullName] = homes[0]
		case 0:
			t.Errorf("no page under docs/api/ has a heading naming %s (%s): add \"### `%s`\" above the table of its RPCs on the page that documents it",
				s.fullName, s.file, s.fullName)
		default:
			var names []string
			for _, p := range homes {
				names = append(names, p.rel)
			}
			t.Errorf("%s is named in a heading of %s: keep it in the heading of one page only", s.fullName, strings.Join(names, " and "))
		}
	}
	return home
}

// checkRPCs asks each service's home to name every RPC; it returns how
// many RPCs there are.
func checkRPCs(t *testing.T, services []*protoService, home map[string]*page) int {
	t.Helper()
	n := 0
	for _, s := range services {
		n += len(s.rpcs)
		p := home[s.fullName]
		if p == nil {
			continue // reported by serviceHomes
		}
		for _, rpc := range s.rpcs {
			if !regexp.MustCompile(`\b` + rpc + `\b`).MatchString(p.text) {
				t.Errorf("%s (home of %s) does not name its RPC %s: describe it there", p.rel, s.fullName, rpc)
			}
		}
	}
	return n
}

// checkRoutes asks the right page to name every route, and every route a
// page names to exist; it returns how many route-page pairs it checked.
func checkRoutes(t *testing.T, owners routeOwners, services []*protoService, home map[string]*page, pages []*page) int {
	t.Helper()
	byName := map[string]*protoService{}
	for _, s := range services {
		byName[s.fullName] = s
	}
	routes := make([]route, 0, len(owners))
	for r := range owners {
		routes = append(routes, r)
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].String() < routes[j].String() })
	checks := 0
	for _, r := range routes {
		for service, sources := range owners[r] {
			checks++
			from := strings.Join(sources, ", ")
			if service == "" {
				if !slices.ContainsFunc(pages, func(p *page) bool { return p.namesRoute(r) }) {
					t.Errorf("no page under docs/api/ names the route %s (from %s): add a line with \"`%s`\" to docs/api/README.md", r, from, r)
				}
				continue
			}
			p := home[service]
			if p == nil {
				continue // reported by serviceHomes
			}
			if !p.namesRoute(r) {
				if rpc := byName[service].routes[r]; rpc != "" {
					from = "RPC " + rpc + ", from " + from
				}
				t.Errorf("%s (home of %s) does not name the route %s (%s): add a line with \"`%s`\" there", p.rel, service, r, from, r)
			}
		}
	}
	// The other way round: a page must not promise a route nothing serves.
	for _, p := range pages {
		for _, named := range p.routes() {
			if owners[named.route] == nil {
				t.Errorf("%s:%d names %s, which no OpenAPI document, proto http rule or hand-written gateway route serves: correct or remove it",
					p.rel, named.line, named.route)
			}
		}
	}
	return checks
}

// checkEvents asks docs/events.md to name every event envelope and every
// event of its oneof; it returns how many there are.
func checkEvents(t *testing.T, root string) int {
	t.Helper()
	events := readProtoEvents(t, filepath.Join(root, "proto"))
	eventsPage := filepath.Join("docs", "events.md")
	b, err := os.ReadFile(filepath.Join(root, eventsPage))
	if err != nil {
		t.Fatalf("%s: %v", eventsPage, err)
	}
	for _, e := range events {
		if !regexp.MustCompile(`\b` + e.name + `\b`).Match(b) {
			t.Errorf("%s does not name %s (%s %s in %s): add a section for it", eventsPage, e.name, e.role, e.envelope, e.file)
		}
	}
	return len(events)
}

// repoRoot is the directory holding go.work, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.work not found above the test's directory")
		}
		dir = parent
	}
}

// docsTestHandler is the gateway's real HTTP handler with live streams
// enabled (their routes join the served document) over a scheduler
// connection that is never dialled, and a stand-in object store.
func docsTestHandler(t *testing.T) http.Handler {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///docs-test.invalid", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	lv, err := live.New(live.Config{Tasks: taskv1.NewTaskServiceClient(conn), Groups: taskv1.NewTaskGroupServiceClient(conn)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(context.Background(), Options{
		Upstream: conn,
		Ready:    func() bool { return true },
		Objects: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(objectsMarker, "1")
			w.WriteHeader(http.StatusNoContent)
		}),
		Live:    lv,
		Console: console.Handler(),
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set(metricsMarker, "1") }),
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

// openAPIRoutes returns the routes of an OpenAPI 2.0 document with their
// operation ids.
func openAPIRoutes(t *testing.T, name string, doc []byte) map[route]string {
	t.Helper()
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := map[route]string{}
	for path, ops := range d.Paths {
		for method, raw := range ops {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue // e.g. a path-level "parameters" list
			}
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %s %s: %v", name, method, path, err)
			}
			out[route{strings.ToUpper(method), path}] = op.OperationID
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no routes", name)
	}
	return out
}

var (
	protoPackage   = regexp.MustCompile(`(?m)^package ([\w.]+);`)
	protoServiceRE = regexp.MustCompile(`(?m)^service (\w+) \{`)
	protoBlockEnd  = regexp.MustCompile(`(?m)^\}`)
	protoRPC       = regexp.MustCompile(`(?m)^\s*rpc (\w+)\(`)
	// An HTTP binding of a google.api.http rule, additional ones included.
	protoHTTP    = regexp.MustCompile(`\b(get|put|post|delete|patch): "([^"]+)"`)
	protoMessage = regexp.MustCompile(`(?m)^message (\w+) \{`)
	protoOneof   = regexp.MustCompile(`(?m)^\s*oneof event \{`)
	protoField   = regexp.MustCompile(`(?m)^\s*([A-Z]\w*) \w+ = \d+;`)
)

// readProtoServices reads every service of the .proto files under dir.
// The files are kept formatted by `buf format`, which the patterns rely on
// (a top-level block closes with "}" at the start of a line).
func readProtoServices(t *testing.T, dir string) []*protoService {
	t.Helper()
	var out []*protoService
	eachProto(t, dir, func(rel, src string) {
		pkg := protoPackage.FindStringSubmatch(src)
		if pkg == nil {
			t.Fatalf("%s: no package", rel)
		}
		for _, m := range protoServiceRE.FindAllStringSubmatchIndex(src, -1) {
			body := block(src, m[1])
			s := &protoService{short: src[m[2]:m[3]], file: rel, routes: map[route]string{}}
			s.fullName = pkg[1] + "." + s.short
			rpcs := protoRPC.FindAllStringSubmatchIndex(body, -1)
			for i, r := range rpcs {
				name := body[r[2]:r[3]]
				s.rpcs = append(s.rpcs, name)
				end := len(body)
				if i+1 < len(rpcs) {
					end = rpcs[i+1][0]
				}
				for _, h := range protoHTTP.FindAllStringSubmatch(body[r[1]:end], -1) {
					s.routes[route{strings.ToUpper(h[1]), h[2]}] = name
				}
			}
			if len(s.rpcs) == 0 {
				t.Fatalf("%s: service %s has no RPCs (is the file formatted?)", rel, s.fullName)
			}
			out = append(out, s)
		}
	})
	if len(out) == 0 {
		t.Fatalf("no services under %s", dir)
	}
	return out
}

// protoEvent is a member of an event envelope's oneof, or the envelope.
type protoEvent struct{ name, role, envelope, file string }

// readProtoEvents reads the envelopes (messages with a "oneof event") and
// their events.
func readProtoEvents(t *testing.T, dir string) []protoEvent {
	t.Helper()
	var out []protoEvent
	eachProto(t, dir, func(rel, src string) {
		pkg := protoPackage.FindStringSubmatch(src)
		for _, m := range protoMessage.FindAllStringSubmatchIndex(src, -1) {
			body := block(src, m[1])
			o := protoOneof.FindStringIndex(body)
			if o == nil {
				continue
			}
			envelope := pkg[1] + "." + src[m[2]:m[3]]
			out = append(out, protoEvent{name: src[m[2]:m[3]], role: "the event envelope", envelope: envelope, file: rel})
			oneof := body[o[1]:]
			if end := strings.Index(oneof, "\n  }"); end >= 0 {
				oneof = oneof[:end]
			}
			for _, f := range protoField.FindAllStringSubmatch(oneof, -1) {
				out = append(out, protoEvent{name: f[1], role: "an event in the oneof of", envelope: envelope, file: rel})
			}
		}
	})
	if len(out) == 0 {
		t.Fatalf("no event envelopes under %s", dir)
	}
	return out
}

func eachProto(t *testing.T, dir string, f func(rel, src string)) {
	t.Helper()
	root := filepath.Dir(dir)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		f(rel, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// block returns the text from start to the next line that is a lone "}".
func block(src string, start int) string {
	rest := src[start:]
	if end := protoBlockEnd.FindStringIndex(rest); end != nil {
		return rest[:end[0]]
	}
	return rest
}

// page is a Markdown page under docs/api/.
type page struct {
	rel, text string
	headings  []string
}

func readPages(t *testing.T, dir string) []*page {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	var out []*page
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p := &page{rel: filepath.Join("docs", "api", filepath.Base(path)), text: string(b)}
		inFence := false
		for _, line := range strings.Split(p.text, "\n") {
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			if !inFence && strings.HasPrefix(line, "#") {
				p.headings = append(p.headings, line)
			}
		}
		out = append(out, p)
	}
	return out
}

func (p *page) headingNames(fullName string) bool {
	return slices.ContainsFunc(p.headings, func(h string) bool {
		return regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(fullName) + `($|[^\w.])`).MatchString(h)
	})
}

func (p *page) namesRoute(r route) bool { return strings.Contains(p.text, "`"+r.String()+"`") }

// namedRoute is a route a page names, at a line.
type namedRoute struct {
	route route
	line  int
}

var docRoute = regexp.MustCompile("`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`\\s?]*)(\\?[^`]*)?`")

func (p *page) routes() []namedRoute {
	var out []namedRoute
	for i, line := range strings.Split(p.text, "\n") {
		for _, m := range docRoute.FindAllStringSubmatch(line, -1) {
			out = append(out, namedRoute{route{m[1], m[2]}, i + 1})
		}
	}
	return out
}
