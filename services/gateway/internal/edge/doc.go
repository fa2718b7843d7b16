// Package edge refuses malformed input at the gateway, before any service
// sees it, the same way on every route: a route added to the protos (REST
// through grpc-gateway, or a gRPC method through the front door) is
// covered without being named here. The rules are in docs/api/README.md
// ("Bad input"):
//
//   - NUL and invalid UTF-8 in a path segment, a query parameter or any
//     string of a JSON body (keys included), and a lone UTF-16 surrogate
//     escape, are 400: Postgres cannot store NUL in text, and invalid
//     UTF-8 fails protobuf's encoding deep inside a service, where it
//     used to surface as an internal error;
//   - a path segment (an id) longer than MaxSegmentRunes characters is
//     400, the cap every id of the APIs has;
//   - a body over the route family's limit is 413, whatever the route;
//   - a body whose Content-Type is not JSON on a JSON route is 415,
//     except that a JSON text under a client's default type for an
//     unlabelled body (curl -d's form type, fetch's text/plain) is read
//     as JSON, as is a body there that opens as JSON does but is
//     malformed (the route's decoder then answers it with 400).
//
// Over gRPC the front door decodes each request message with its
// method's type and refuses invalid UTF-8 and NUL in any string field with
// InvalidArgument; the ids' caps are the protos' own rules.
//
// Answers use the route's own error body (package httperr): the video
// API's {"code":"InvalidParameter",…} on its routes, the task envelope
// elsewhere. Malformed JSON passes through: the route's decoder answers it
// with its documented message.
package edge
