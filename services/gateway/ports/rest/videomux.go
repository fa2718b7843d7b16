package rest

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/apijson"
)

// maxVideoBodyBytes bounds the video API's bodies: a first frame of 10 MB
// sent as base64 in a data: URI is about 13.4 MB. The cap is well above
// that so that a first frame somewhat over its limit (a 2000×2000 BMP is
// 12 MB, 16 MB as base64) is answered with the field's own 400, which names
// the 10 MB limit, rather than a 413 about the body; only a body no first
// frame explains (over about 24 MB of image) is refused unread.
const maxVideoBodyBytes = 32 << 20

// videoMarshaler writes the video API's JSON (docs/api/video.md), whose keys
// mix snake_case and camelCase: every field of the video protos names its
// documented key with json_name, so the JSON names are used. Unset message
// fields are present as null, as docs/api/video.md shows them
// ("completed_time": null, "video_url": null), while unset proto3 optional
// fields are left out — which is how taskInput.actual_prompt is absent when
// prompt_extend is off, and data.code and data.message appear only for a
// FAILED task. Unknown request fields are errors, as on the task API, and
// so is a number sent as a string ("seed": "10"): the document types the
// video API's numbers *integer*.
var videoMarshaler = &apijson.Marshaler{JSONPb: runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}, StrictIntegers: true, PathErrors: true}

// newVideoMux returns the generated REST mux of the video API, with the
// same header rules and error handlers as the task API's (the error writer
// picks the video error body by path).
func newVideoMux(ctx context.Context, upstream grpc.ClientConnInterface, routes routeIndex, log *slog.Logger) (*runtime.ServeMux, error) {
	errs := &errorWriter{log: log, routes: routes}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, videoMarshaler),
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithDisableHTTPMethodOverride(),
		runtime.WithDisablePathLengthFallback(),
		runtime.WithErrorHandler(errs.grpcError),
		runtime.WithRoutingErrorHandler(errs.routingError),
		runtime.WithMiddlewares(recordRoute),
	)
	if err := videov1.RegisterVideoServiceHandlerClient(ctx, mux, videov1.NewVideoServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register video service: %w", err)
	}
	return mux, nil
}
