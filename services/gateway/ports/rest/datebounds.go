package rest

import (
	"net/http"
	"net/url"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/datebound"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// dateBounds are the query parameters of a GET route whose value is a
// time (a google.protobuf.Timestamp of the request) and may also be a date
// (YYYY-MM-DD, UTC), read by package datebound as the audit log's from and
// to are: on GET /api/v1/tasks, created_after=D is the start of day D and
// created_before=D includes the whole of day D (it is the start of the
// next day, exclusive), as the audit log's to=D does; an RFC 3339 time is
// itself on both (docs/api/tasks.md, ListTasks). Both the proto and the
// JSON name of a parameter are listed, as the generated mux reads either.
var dateBounds = map[string]map[string]func(string) (time.Time, error){
	"/api/v1/tasks": {
		"created_after":  afterBound,
		"createdAfter":   afterBound,
		"created_before": datebound.ParseBefore,
		"createdBefore":  datebound.ParseBefore,
	},
}

func afterBound(s string) (time.Time, error) { return datebound.Parse(s, false) }

// readDateBounds rewrites the dateBounds of a request as the RFC 3339
// times they mean, which the generated mux parses, and answers a value
// that is neither a date nor an RFC 3339 time with 30005 naming the
// parameter. An empty value is no bound, as an empty from is on the audit
// log.
func readDateBounds(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		params, ok := dateBounds[r.URL.Path]
		if !ok || r.Method != http.MethodGet || r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			// The edge refuses a malformed query before this runs.
			next.ServeHTTP(w, r)
			return
		}
		changed := false
		for name, parse := range params {
			values, ok := q[name]
			if !ok {
				continue
			}
			var times []string
			for _, v := range values {
				t, err := parse(v)
				if err != nil {
					httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, name+" "+err.Error()))
					return
				}
				if !t.IsZero() {
					times = append(times, t.Format(time.RFC3339Nano))
				}
			}
			if len(times) == 0 {
				q.Del(name)
			} else {
				q[name] = times
			}
			changed = true
		}
		if changed {
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}
