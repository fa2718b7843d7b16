// Package grpcproxy is the gateway's gRPC front door, for generated clients
// (`taskmesh ctl`) and executor agents. It forwards every call to the
// scheduler without knowing the methods: an unknown-service handler receives
// each call, a codec passes request and response frames through as bytes,
// and the call is replayed on the scheduler connection, unary and streaming
// alike (TaskService.WatchTask). Adding an RPC to the protos therefore needs
// no gateway change.
//
// Before forwarding, the caller is authenticated from its "authorization"
// metadata with the same credentials and kind rules as REST (user keys reach
// TaskService and VideoService, agent tokens LeaseService, anything else is
// PermissionDenied). Incoming metadata is dropped except the trace context
// and x-request-id; package outbound builds the scheduler's metadata from
// scratch. Response headers, messages, trailers and the final status
// (including error details such as ErrorInfo) come back unchanged, and
// every answer carries the call's request id as x-request-id header
// metadata.
//
// Each request message is checked for bad input (package edge) before it
// is forwarded. The services the gateway implements itself (the admin
// API) are dispatched by the same handler, so they are admitted and
// checked alike. The grpc.health.v1 service is served by the front door
// itself, without authentication; gRPC server reflection is served to any
// authenticated caller and lists the public services.
package grpcproxy
