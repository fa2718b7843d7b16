package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// allowIndex knows the methods of every route of the served OpenAPI
// document, so a 405 can say which methods the path does take: HTTP
// requires the Allow header on a 405 (RFC 9110 §15.5.6), and without it a
// client learns only that its method is wrong.
type allowIndex []allowRoute

type allowRoute struct {
	// segments of the path template; a "{…}" segment matches any one
	// segment, as the mux's path parameters do.
	segments []string
	methods  []string
}

// methodOrder is the order methods are listed in Allow.
var methodOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// newAllowIndex reads the routes of doc, an OpenAPI 2.0 document.
func newAllowIndex(doc []byte) (allowIndex, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("rest: reading the routes of the openapi document: %w", err)
	}
	ix := make(allowIndex, 0, len(d.Paths))
	for path, ops := range d.Paths {
		var methods []string
		for m := range ops {
			if m = strings.ToUpper(m); slices.Contains(methodOrder, m) {
				methods = append(methods, m)
			}
		}
		ix = append(ix, allowRoute{segments: strings.Split(path, "/"), methods: methods})
	}
	return ix, nil
}

// allow is the Allow header's value for path: the methods of every route
// template path matches, in methodOrder ("" when none matches).
func (ix allowIndex) allow(path string) string {
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
