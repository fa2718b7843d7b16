package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// kueueRoutes are the routes whose body is the spec of a Kueue object
// (docs/api/quota.md#queue-admission), by path prefix, with the object's
// Kueue kind; the rest of the path is the object's name.
var kueueRoutes = []struct{ prefix, kind string }{
	{"/api/v1/cluster-queues/", "ClusterQueue"},
	{"/api/v1/cohorts/", "Cohort"},
	{"/api/v1/local-queues/", "LocalQueue"},
}

// kueueAPIGroup is the API group of Kueue's objects
// (apiVersion kueue.x-k8s.io/v1beta1, …).
const kueueAPIGroup = "kueue.x-k8s.io/"

// quantityKeys are the quantity fields of a spec's resources, by both the
// names protobuf JSON accepts.
var quantityKeys = map[string]bool{
	"nominal_quota": true, "nominalQuota": true,
	"borrowing_limit": true, "borrowingLimit": true,
	"lending_limit": true, "lendingLimit": true,
}

// kueueSpecs lets the body of a ClusterQueue, cohort or LocalQueue PUT be
// written as Kueue writes it: the whole object, {"apiVersion":
// "kueue.x-k8s.io/…", "kind", "metadata", "spec", "status"}, whose spec is
// then the body (its metadata.name, when given, must be the path's name);
// the fields Kueue writes or defaults that describe what Taskmesh does
// anyway (namespaceSelector: {}, stopPolicy: None, …), which are dropped,
// while a value asking for behaviour Taskmesh does not have is refused
// (kueueOnlyFields); and quantities as JSON numbers (nominalQuota: 8), as
// Kubernetes accepts them, which become the quantity strings the API
// stores and answers ("8"). Field names may be Kueue's camelCase as well:
// protobuf JSON takes both. Any other body, and one that does not decode,
// goes on as sent, for the route to answer.
//
// This is the one place for Kueue's own fields: they have no place in the
// specs of the AdmissionService (gRPC callers cannot send them), so the
// quota service never sees them; only the JSON of a REST body can carry
// them, and it is judged here before it is decoded.
func kueueSpecs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, kind, ok := kueueRoute(r.URL.Path)
		if r.Method != http.MethodPut || !ok || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := edge.ReadBody(r)
		if err == nil {
			out, err := kueueBody(body, kind, name)
			if err != nil {
				httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, err.Error()))
				return
			}
			if out != nil {
				body = out
			}
		}
		edge.SetBody(r, body)
		next.ServeHTTP(w, r)
	})
}

// kueueBody is the body a PUT of kind's object name goes on with: the
// spec of a manifest, without the fields kueueOnlyFields drops, with its
// quantities spelled as strings. It is nil when body goes on as sent, and
// err is set when the body is refused.
func kueueBody(body []byte, kind, name string) ([]byte, error) {
	spec, isManifest, err := kueueManifest(body, kind, name)
	if err != nil {
		return nil, err
	}
	at := ""
	if isManifest {
		body, at = spec, "spec."
	}
	obj, ok := decodeObject(body)
	if !ok {
		if isManifest {
			return body, nil
		}
		return nil, nil
	}
	dropped, err := kueueOnlyFields(obj, kind, at)
	if err != nil {
		return nil, err
	}
	if spelled := spellQuantityValues(obj); !dropped && !spelled {
		if isManifest {
			return body, nil
		}
		return nil, nil
	}
	return encodeObject(obj)
}

// kueueRoute reports the name and Kueue kind of a PUT route's object.
func kueueRoute(path string) (name, kind string, ok bool) {
	for _, rt := range kueueRoutes {
		if name, ok := strings.CutPrefix(path, rt.prefix); ok && name != "" && !strings.Contains(name, "/") {
			return name, rt.kind, true
		}
	}
	return "", "", false
}

// kueueManifest returns the spec of body when body is a Kueue object of
// kind: apiVersion of Kueue's group, kind, metadata, spec and status (what
// Kueue reports, dropped), and nothing else. Only metadata.name is read:
// namespace, labels, annotations, uid, resourceVersion, … say nothing
// Taskmesh keeps. err is set when it is one whose metadata.name is not
// name.
func kueueManifest(body []byte, kind, name string) (spec []byte, ok bool, err error) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil, false, nil
	}
	var apiVersion, gotKind string
	if json.Unmarshal(m["apiVersion"], &apiVersion) != nil || json.Unmarshal(m["kind"], &gotKind) != nil ||
		!strings.HasPrefix(apiVersion, kueueAPIGroup) || gotKind != kind || m["spec"] == nil {
		return nil, false, nil
	}
	for k := range m {
		switch k {
		case "apiVersion", "kind", "metadata", "spec", "status":
		default:
			return nil, false, nil
		}
	}
	if raw, has := m["metadata"]; has {
		var meta struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, false, fmt.Errorf("invalid metadata: %v", err)
		}
		if meta.Name != "" && meta.Name != name {
			return nil, false, fmt.Errorf("invalid metadata.name: %q is not %q, the name in the path", meta.Name, name)
		}
	}
	return m["spec"], true, nil
}

// spellQuantities rewrites the numeric quantities of a spec's
// resource_groups[].flavors[].resources[] as strings; ok is false when
// there were none (or body is no JSON object), and body is then sent as
// it is.
func spellQuantities(body []byte) ([]byte, bool) {
	spec, ok := decodeObject(body)
	if !ok || !spellQuantityValues(spec) {
		return nil, false
	}
	out, err := encodeObject(spec)
	return out, err == nil
}

// spellQuantityValues rewrites the numeric quantities of spec's resources
// as strings and reports whether there were any.
func spellQuantityValues(spec map[string]any) bool {
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
	return changed
}

// decodeObject decodes body when it is one JSON object, numbers kept as
// written.
func decodeObject(body []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]any
	if dec.Decode(&obj) != nil || dec.More() || obj == nil {
		return nil, false
	}
	return obj, true
}

func encodeObject(obj map[string]any) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
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
