package rest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/readonlykeys"
	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
)

// updateRoute is a PUT route whose body changes only what it gives: a
// task's (docs/api/tasks.md, UpdateTask) or a template's
// (docs/api/templates.md#updating-a-template). Protobuf carries a field
// given empty like one left out, so the request's update_mask says what
// the body gave, as the route's RPC reads its mask.
type updateRoute struct {
	// prefix is the route's path up to its {id}.
	prefix string
	// prepare, when set, makes the body what the route reads.
	prepare func(body []byte) []byte
	// paths are the update_mask paths body, a JSON object, gives.
	paths func(body map[string]json.RawMessage) []string
}

var updateRoutes = []updateRoute{
	// A task update takes what the body gives that is not empty; the mask
	// names only the fields it gives empty on purpose.
	{prefix: "/api/v1/tasks/", prepare: withoutTaskReadOnly, paths: clearedPaths},
	// A template update takes the fields its mask names; the mask names
	// every one the body gives.
	{prefix: "/api/v1/templates/", paths: givenTemplatePaths},
}

// updateRouteOf returns r's route when r is an update of updateRoutes.
func updateRouteOf(r *http.Request) (updateRoute, bool) {
	if r.Method != http.MethodPut {
		return updateRoute{}, false
	}
	for _, u := range updateRoutes {
		if id, ok := strings.CutPrefix(r.URL.Path, u.prefix); ok && id != "" && !strings.Contains(id, "/") {
			return u, true
		}
	}
	return updateRoute{}, false
}

// partialUpdates prepares the body of an update of updateRoutes and names
// in its update_mask what the body gives (fillUpdateMask). Any other
// request goes on as it is.
func partialUpdates(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := updateRouteOf(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		var body []byte
		var err error
		if r.Body != nil && r.Body != http.NoBody {
			body, err = edge.ReadBody(r)
		}
		if err == nil && len(bytes.TrimSpace(body)) == 0 {
			// No body gives no field, as {} does: it changes nothing,
			// where an empty message would replace everything.
			body = []byte("{}")
		}
		if err == nil {
			if u.prepare != nil {
				body = u.prepare(body)
			}
			fillUpdateMask(r, u, body)
		}
		edge.SetBody(r, body)
		next.ServeHTTP(w, r)
	})
}

// fillUpdateMask names, in r's update_mask query parameter, the paths u
// reads from body, beside those the client put in the query itself (an
// empty one names nothing). A body that is not a JSON object names nothing
// (the route then reports it).
func fillUpdateMask(r *http.Request, u updateRoute, body []byte) {
	var paths []string
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) == nil && m != nil {
		paths = u.paths(m)
	}
	q := r.URL.Query()
	if len(paths) == 0 && !q.Has("update_mask") && !q.Has("updateMask") {
		return
	}
	// The query may name the mask by its JSON name too; both become the
	// one parameter, or the route would read the field twice. An empty
	// value (`?update_mask=`) names nothing.
	for _, name := range []string{"update_mask", "updateMask"} {
		for _, given := range q[name] {
			for _, path := range strings.Split(given, ",") {
				if path != "" {
					paths = append(paths, path)
				}
			}
		}
		q.Del(name)
	}
	if len(paths) > 0 {
		slices.Sort(paths)
		q.Set("update_mask", strings.Join(slices.Compact(paths), ","))
	}
	r.URL.RawQuery = q.Encode()
}

// taskReadOnly are the keys of a Task, as every answer shows it, that a
// TaskSpec does not have: what only the server sets (status, retry_count,
// the attempt, the timestamps, …), and inside checkpoint all but enabled.
// A create or an update (POST /api/v1/tasks, PUT /api/v1/tasks/{id})
// leaves them out, so a client may send back the task it read with the
// fields it changed, as it may a template; a key of neither message is
// still an unknown field (30005).
var taskReadOnly = readonlykeys.Between((&taskv1.Task{}).ProtoReflect().Descriptor(), (&taskv1.TaskSpec{}).ProtoReflect().Descriptor())

// withoutTaskReadOnly returns body, a task's JSON object, without
// taskReadOnly's keys. Anything that is not a JSON object goes on as it is
// (the route then reports it).
func withoutTaskReadOnly(body []byte) []byte {
	out, _ := readonlykeys.Drop(body, taskReadOnly)
	return out
}

// clearableKeys are the TaskSpec lists and maps a task update clears when
// its body gives them empty, by the JSON keys protojson reads them under,
// with the update mask path that names each (docs/api/tasks.md,
// UpdateTask). distribution's labels are one level down.
var clearableKeys = map[string]string{
	"args": "args", "env": "env", "depends_on": "depends_on", "dependsOn": "depends_on",
	"artifacts": "artifacts", "resources": "resources",
}

// clearableStrings are the TaskSpec strings an update takes as given when
// its body gives them as "" (docs/api/tasks.md, UpdateTask).
var clearableStrings = []string{"name", "command", "workdir", "webhook"}

// clearedPaths are the lists, maps and strings the task update body gives
// as [], {} or "": those the client emptied on purpose, since an empty
// value left unnamed keeps the task's.
func clearedPaths(m map[string]json.RawMessage) []string {
	var paths []string
	for k, v := range m {
		if p, ok := clearableKeys[k]; ok && emptyJSON(v) {
			paths = append(paths, p)
		}
		if slices.Contains(clearableStrings, k) && string(bytes.TrimSpace(v)) == `""` {
			paths = append(paths, k)
		}
	}
	if d, ok := m["distribution"]; ok {
		var dist map[string]json.RawMessage
		if json.Unmarshal(d, &dist) == nil && emptyJSON(dist["labels"]) {
			paths = append(paths, "distribution.labels")
		}
	}
	return paths
}

// templateKeys are the TaskTemplate fields by the JSON keys protojson
// reads them under, its proto name and its JSON name alike.
var templateKeys = fieldKeys((&taskv1.TaskTemplate{}).ProtoReflect().Descriptor())

func fieldKeys(md protoreflect.MessageDescriptor) map[string]string {
	keys := map[string]string{}
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		keys[string(f.Name())], keys[f.JSONName()] = string(f.Name()), string(f.Name())
	}
	return keys
}

// givenTemplatePaths are the TaskTemplate fields the template update body
// gives, empty or not, and id, which the route's path gives: so a body
// that gives nothing changes nothing, as a mask naming no field would
// replace the whole definition. A key given as null is left out, as
// protojson reads it; a key of no field is left for the route to refuse.
func givenTemplatePaths(m map[string]json.RawMessage) []string {
	paths := []string{"id"}
	for k, v := range m {
		if p, ok := templateKeys[k]; ok && string(bytes.TrimSpace(v)) != "null" {
			paths = append(paths, p)
		}
	}
	return paths
}

// emptyJSON reports whether v is [] or {} (a missing key or null is not:
// that leaves the field out).
func emptyJSON(v json.RawMessage) bool {
	var arr []json.RawMessage
	if json.Unmarshal(v, &arr) == nil && arr != nil {
		return len(arr) == 0
	}
	var obj map[string]json.RawMessage
	return json.Unmarshal(v, &obj) == nil && obj != nil && len(obj) == 0
}
