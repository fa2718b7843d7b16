package rest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// quantityRoutes are the routes whose body is a ClusterQueue's or a
// cohort's spec (docs/api/quota.md#queue-admission), by path prefix; the
// rest of the path is the queue's or cohort's name.
var quantityRoutes = []string{"/api/v1/cluster-queues/", "/api/v1/cohorts/"}

// quantityKeys are the quantity fields of a spec's resources, by both the
// names protobuf JSON accepts.
var quantityKeys = map[string]bool{
	"nominal_quota": true, "nominalQuota": true,
	"borrowing_limit": true, "borrowingLimit": true,
	"lending_limit": true, "lendingLimit": true,
}

// quantityNumbers lets a spec give a quantity as a JSON number, as a
// Kueue manifest does (nominalQuota: 8) and as Kubernetes accepts for
// any quantity: the number becomes the quantity string it spells ("8"),
// which the API stores and answers. Other bodies, and a body that does not
// decode, go on as sent, for the route to answer.
func quantityNumbers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !isQuantityRoute(r.URL.Path) || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err == nil {
			if spelled, ok := spellQuantities(body); ok {
				body = spelled
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func isQuantityRoute(path string) bool {
	for _, prefix := range quantityRoutes {
		if name, ok := strings.CutPrefix(path, prefix); ok && name != "" && !strings.Contains(name, "/") {
			return true
		}
	}
	return false
}

// spellQuantities rewrites the numeric quantities of a spec's
// resource_groups[].flavors[].resources[] as strings; ok is false when
// there were none (or body is no JSON object), and body is then sent as
// it is.
func spellQuantities(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var spec map[string]any
	if dec.Decode(&spec) != nil || dec.More() {
		return nil, false
	}
	changed := false
	for _, groups := range []any{spec["resource_groups"], spec["resourceGroups"]} {
		for _, g := range objects(groups) {
			for _, f := range objects(g["flavors"]) {
				for _, res := range objects(f["resources"]) {
					for k, v := range res {
						if n, isNum := v.(json.Number); isNum && quantityKeys[k] {
							res[k] = n.String()
							changed = true
						}
					}
				}
			}
		}
	}
	if !changed {
		return nil, false
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(spec) != nil {
		return nil, false
	}
	return out.Bytes(), true
}

// objects is the JSON objects of v when v is an array.
func objects(v any) []map[string]any {
	arr, _ := v.([]any)
	out := make([]map[string]any, 0, len(arr))
	for _, x := range arr {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
