package rest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// requiredBodyFields names, per route, the body fields a request must
// send. In proto3 a string or number left out reads as "" or 0, and on
// these routes that value is a destructive instruction: a body-less PUT
// must not remove the webhook endpoint or empty a cluster's inventory.
// A client that means it sends the value ("url": "", "total_gpus": 0).
var requiredBodyFields = map[string][]protoreflect.FieldDescriptor{
	"PUT /api/v1/webhook-endpoint":                            fieldsOf(&webhookv1.SetWebhookEndpointRequest{}, "url"),
	"PUT /api/v1/clusters/{cluster}/inventory/{machine_type}": fieldsOf(&quotav1.SetInventoryRequest{}, "total_gpus"),
}

// operatorRoutes are the routes of requiredBodyFields only operators may
// call. Who may call is judged before what is sent
// (docs/api/quota.md): another caller's body is not checked here, and
// the service answers it 403.
var operatorRoutes = map[string]bool{
	"PUT /api/v1/clusters/{cluster}/inventory/{machine_type}": true,
}

// fieldsOf returns the descriptors of m's fields named names; it panics on
// a name m does not have, at start-up.
func fieldsOf(m proto.Message, names ...protoreflect.Name) []protoreflect.FieldDescriptor {
	desc := m.ProtoReflect().Descriptor()
	out := make([]protoreflect.FieldDescriptor, len(names))
	for i, n := range names {
		if out[i] = desc.Fields().ByName(n); out[i] == nil {
			panic("rest: " + string(desc.FullName()) + " has no field " + string(n))
		}
	}
	return out
}

// requireBodyFields refuses, on the routes of requiredBodyFields, a body
// that is not a JSON object with each of the route's fields at its top
// level (under its proto or its JSON name): 400 with code 30005 in the
// route's envelope, before anything is called. A body that is not a JSON
// object is left to the route's decoder, which names the problem. The
// edge has already read and bounded the body.
func requireBodyFields(next runtime.HandlerFunc) runtime.HandlerFunc {
	// The route's fields, looked up on its first request (the pattern is
	// only known then); nil until then, empty for routes with none.
	var fields atomic.Pointer[[]protoreflect.FieldDescriptor]
	var operatorOnly atomic.Bool
	return func(w http.ResponseWriter, r *http.Request, p map[string]string) {
		want := fields.Load()
		if want == nil {
			pattern, ok := runtime.HTTPPattern(r.Context())
			if !ok {
				next(w, r, p)
				return
			}
			route := r.Method + " " + routeTemplate(pattern.String())
			f := requiredBodyFields[route]
			if f == nil {
				f = []protoreflect.FieldDescriptor{}
			}
			operatorOnly.Store(operatorRoutes[route])
			fields.Store(&f)
			want = &f
		}
		if len(*want) == 0 {
			next(w, r, p)
			return
		}
		if principal, _ := authn.FromContext(r.Context()); operatorOnly.Load() && principal.Kind != authn.KindAdmin {
			next(w, r, p)
			return
		}
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			var err error
			if body, err = edge.ReadBody(r); err != nil {
				httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, "request body could not be read"))
				return
			}
		}
		if missing := missingFields(body, *want); len(missing) > 0 {
			httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument,
				strings.Join(missing, ", ")+": required (send the empty value itself to clear it)"))
			return
		}
		edge.SetBody(r, body)
		next(w, r, p)
	}
}

// missingFields returns the names of those of fields that body, a JSON
// object, does not have at its top level (all of them for an empty body).
// A body that is not a JSON object misses nothing here.
func missingFields(body []byte, fields []protoreflect.FieldDescriptor) []string {
	var keys map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &keys); err != nil || keys == nil {
			return nil
		}
	}
	var missing []string
	for _, f := range fields {
		_, byName := keys[string(f.Name())]
		_, byJSONName := keys[f.JSONName()]
		if !byName && !byJSONName {
			missing = append(missing, string(f.Name()))
		}
	}
	return missing
}
