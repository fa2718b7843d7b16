package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// routeIndex knows the routes of the served OpenAPI document:
//   - the methods of each, so a 405 can say which methods the path does
//     take: HTTP requires the Allow header on a 405 (RFC 9110 §15.5.6), and
//     without it a client learns only that its method is wrong;
//   - the request field a route's body fills, where the body is one field
//     of the request (POST /api/v1/tasks is the request's spec), so that
//     a validation error names the body's own fields (bodyFieldPaths).
type routeIndex []servedRoute

type servedRoute struct {
	// template is the path template as the document writes it; segments
	// are its parts, where a "{…}" segment matches any one segment, as the
	// mux's path parameters do.
	template string
	segments []string
	methods  []string
	// bodies maps a method to the request field its body fills, for the
	// methods whose body is one field ("spec"), not the whole request.
	bodies map[string]string
}

// methodOrder is the order methods are listed in Allow.
var methodOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// operation is what the index reads of one OpenAPI 2.0 operation: its
// body parameter, named after the request field it fills ("body" when it
// is the whole request).
type operation struct {
	Parameters []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
}

// newRouteIndex reads the routes of doc, an OpenAPI 2.0 document.
func newRouteIndex(doc []byte) (routeIndex, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("rest: reading the routes of the openapi document: %w", err)
	}
	ix := make(routeIndex, 0, len(d.Paths))
	for path, ops := range d.Paths {
		rt := servedRoute{template: path, segments: strings.Split(path, "/")}
		for m, raw := range ops {
			if m = strings.ToUpper(m); !slices.Contains(methodOrder, m) {
				continue
			}
			rt.methods = append(rt.methods, m)
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("rest: reading %s %s of the openapi document: %w", m, path, err)
			}
			for _, p := range op.Parameters {
				if p.In == "body" && p.Name != "body" && p.Name != "" {
					if rt.bodies == nil {
						rt.bodies = map[string]string{}
					}
					rt.bodies[m] = p.Name
				}
			}
		}
		ix = append(ix, rt)
	}
	return ix, nil
}

// bodyField is the request field the body of method on the route template
// fills, "" when the body is the whole request (or there is none).
func (ix routeIndex) bodyField(method, template string) string {
	for _, rt := range ix {
		if rt.template == template {
			return rt.bodies[method]
		}
	}
	return ""
}

// bodyFieldPaths rewrites the field paths of a validation message (the
// request's, "spec.priority: must be …") as paths in the body a client
// sent ("priority: must be …"), for a route whose body fills field. A path
// starts the message or follows "error: " (a single violation), a list
// marker (" - ", several) or a separator ("; "); text elsewhere, such as
// a value quoted in a description, is left as it is.
func bodyFieldPaths(msg, field string) string {
	if field == "" {
		return msg
	}
	prefix := field + "."
	for _, before := range []string{"error: ", " - ", "; "} {
		msg = strings.ReplaceAll(msg, before+prefix, before)
	}
	return strings.TrimPrefix(msg, prefix)
}

// serves reports whether some route template matches path, whatever the
// method.
func (ix routeIndex) serves(path string) bool { return ix.allow(path) != "" }

// allow is the Allow header's value for path: the methods of every route
// template path matches, in methodOrder ("" when none matches).
func (ix routeIndex) allow(path string) string {
	segs := strings.Split(path, "/")
	seen := map[string]bool{}
	for _, rt := range ix {
		if len(rt.segments) != len(segs) {
			continue
		}
		match := true
		for i, s := range rt.segments {
			if s != segs[i] && !(strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")) {
				match = false
				break
			}
		}
		if match {
			for _, m := range rt.methods {
				seen[m] = true
			}
		}
	}
	var out []string
	for _, m := range methodOrder {
		if seen[m] {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}
