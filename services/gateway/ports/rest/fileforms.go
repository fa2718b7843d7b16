package rest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
)

// fileForms are the create routes whose body may also be a task file's
// form: the object under its one top-level key (`task:` of a task file,
// `group:` of a group file, docs/ctl.md), as a client gets by turning the
// file into JSON. The `repeat:` form of a group file needs nothing here:
// `repeat` is a field of the group create body itself.
var fileForms = map[string]string{
	"/api/v1/tasks":       "task",
	"/api/v1/task-groups": "group",
}

// fileFormOf returns the wrapper key r's body may use: a create of
// fileForms, or an update of one task (PUT /api/v1/tasks/{id}), whose body
// is a TaskSpec as the create's is, so the edited task file is sent back
// the way it was first sent.
func fileFormOf(r *http.Request) (string, bool) {
	switch r.Method {
	case http.MethodPost:
		key, ok := fileForms[r.URL.Path]
		return key, ok
	case http.MethodPut:
		id, ok := strings.CutPrefix(r.URL.Path, "/api/v1/tasks/")
		return "task", ok && id != "" && !strings.Contains(id, "/")
	}
	return "", false
}

// unwrapFileForms makes a create (or task update) body that is the task file's form,
// `{"task": {…}}` or `{"group": {…}}` and nothing else, the object it
// wraps. Any other body, a wrapper beside other keys included, goes on
// as sent (and an unknown key is then refused as usual). The edge has
// buffered the body; only a body whose first key is the route's wrapper
// is decoded here.
func unwrapFileForms(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := fileFormOf(r)
		if !ok || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := edge.ReadBody(r)
		if err == nil {
			if inner, ok := wrapped(body, key); ok {
				body = inner
			}
			if key == "task" {
				// A task's body may be the task as the API shows it, the
				// server's own fields included (a task read back, or written
				// with every field of the task's model): those are left out,
				// as an update leaves them out.
				body = withoutTaskReadOnly(body)
			}
		}
		edge.SetBody(r, body)
		next.ServeHTTP(w, r)
	})
}

// wrapped returns the object body holds under key when key is its only
// member.
func wrapped(body []byte, key string) ([]byte, bool) {
	rest := bytes.TrimLeft(body, " \t\r\n")
	if len(rest) == 0 || rest[0] != '{' {
		return nil, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if !bytes.HasPrefix(rest, []byte(`"`+key+`"`)) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || len(m) != 1 {
		return nil, false
	}
	inner, ok := m[key]
	if t := bytes.TrimLeft(inner, " \t\r\n"); !ok || len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	return inner, true
}
