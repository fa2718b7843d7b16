package rest

import (
	"bytes"
	"io"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	"github.com/taskmesh/taskmesh/services/consumers/usage"
)

// csvMIME is the media type of a usage report as CSV.
const csvMIME = "text/csv"

// usageRoute is the route whose answer has a CSV form.
const usageRoute = "/api/v1/usage"

// csvFormat lets GET /api/v1/usage?format=csv ask for CSV as a browser
// link can (it cannot set Accept): it becomes `Accept: text/csv`.
func csvFormat(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == usageRoute && r.URL.Query().Get("format") == "csv" {
			r.Header.Set("Accept", csvMIME)
		}
		next.ServeHTTP(w, r)
	})
}

// csvMarshaler writes a usage report (GetUsageResponse) as CSV
// (consumers/usage.WriteCSV); anything else, and every request body, is
// JSON as on every other route. Errors never reach it: the error handler
// writes the JSON envelope.
type csvMarshaler struct{}

func (csvMarshaler) Marshal(v any) ([]byte, error) {
	if r, ok := v.(*usagev1.GetUsageResponse); ok {
		var b bytes.Buffer
		if err := usage.WriteCSV(&b, r); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	return marshaler.Marshal(v)
}

func (csvMarshaler) Unmarshal(data []byte, v any) error     { return marshaler.Unmarshal(data, v) }
func (csvMarshaler) NewDecoder(r io.Reader) runtime.Decoder { return marshaler.NewDecoder(r) }
func (csvMarshaler) NewEncoder(w io.Writer) runtime.Encoder { return marshaler.NewEncoder(w) }

func (csvMarshaler) ContentType(v any) string {
	if _, ok := v.(*usagev1.GetUsageResponse); ok {
		return "text/csv; charset=utf-8"
	}
	return marshaler.ContentType(v)
}

// documentCSV says in the OpenAPI document that the usage route answers
// CSV too (?format=csv or Accept: text/csv).
func documentCSV(paths map[string]any) {
	item, _ := paths[usageRoute].(map[string]any)
	if op, ok := item["get"].(map[string]any); ok {
		op["produces"] = []any{"application/json", csvMIME}
	}
}
