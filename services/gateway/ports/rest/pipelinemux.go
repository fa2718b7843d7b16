package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/apijson"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// DefaultMaxUploadBytes bounds a POST /jobs/uploads request: the largest
// upload the scheduler's default limits accept (1 GiB) and the multipart
// framing around it. The scheduler applies each kind's own limit.
const DefaultMaxUploadBytes = 1<<30 + 1<<20

// pipelineMarshaler writes the pipeline API's JSON (docs/api/pipeline.md):
// proto field names, every field present, so a result key not produced yet
// is null and a job that did not fail has "error": null. Unknown request
// fields are errors.
var pipelineMarshaler = pipelineJSON{&apijson.Marshaler{JSONPb: runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}}}

// pipelineJSON says what a request body's decoding error is about: the
// generated handlers pass the decoder's error on as the 400's message,
// and "unexpected EOF" alone does not tell a client its JSON is cut.
type pipelineJSON struct{ *apijson.Marshaler }

func (m pipelineJSON) NewDecoder(r io.Reader) runtime.Decoder {
	d := m.Marshaler.NewDecoder(r)
	return runtime.DecoderFunc(func(v any) error {
		err := d.Decode(v)
		if err != nil && !errors.Is(err, io.EOF) { // io.EOF: no body, which the handlers accept
			return fmt.Errorf("malformed JSON body: %w", err)
		}
		return err
	})
}

// uploadRoute is the hand-written multipart upload: grpc-gateway cannot
// turn multipart/form-data into a stream of UploadJobInput messages.
const uploadRoute = "/jobs/uploads"

// newPipelineMux returns the pipeline API's REST mux: the generated
// routes of PipelineService and POST /jobs/uploads.
func newPipelineMux(ctx context.Context, upstream grpc.ClientConnInterface, routes routeIndex, log *slog.Logger) (*runtime.ServeMux, error) {
	errs := &errorWriter{log: log, routes: routes}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, pipelineMarshaler),
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithDisableHTTPMethodOverride(),
		runtime.WithDisablePathLengthFallback(),
		runtime.WithErrorHandler(errs.grpcError),
		runtime.WithRoutingErrorHandler(errs.routingError),
		runtime.WithMiddlewares(recordRoute),
	)
	client := pipelinev1.NewPipelineServiceClient(upstream)
	if err := pipelinev1.RegisterPipelineServiceHandlerClient(ctx, mux, client); err != nil {
		return nil, fmt.Errorf("rest: register pipeline service: %w", err)
	}
	up := &uploads{client: client, log: log}
	if err := mux.HandlePath(http.MethodPost, uploadRoute, up.serve); err != nil {
		return nil, fmt.Errorf("rest: route %s: %w", uploadRoute, err)
	}
	return mux, nil
}

// uploads serves POST /jobs/uploads: a multipart/form-data body with a
// "kind" field and a "file" part, streamed to the scheduler's
// UploadJobInput as it arrives when the kind comes first. A file part
// that comes first is spooled to a temporary file until the kind is
// read (the scheduler needs the kind before the bytes: it decides the
// key and the size limit), then streamed from there and removed.
type uploads struct {
	client pipelinev1.PipelineServiceClient
	log    *slog.Logger
}

// uploadChunk is the size of the messages an upload is sent in.
const uploadChunk = 256 << 10

func (u *uploads) serve(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	bad := func(msg string) {
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, msg))
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		bad("send multipart/form-data with a kind field (model, quant or ref_image) and then a file part")
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		bad("malformed multipart body: " + err.Error())
		return
	}
	kind := ""
	var spooled *os.File // the file part, when it came before the kind
	var spooledName string
	defer func() {
		if spooled != nil {
			_ = spooled.Close()
			_ = os.Remove(spooled.Name())
		}
	}()
	for {
		part, err := mr.NextPart()
		switch {
		case errors.Is(err, io.EOF) && spooled != nil:
			bad("no kind field: send a kind field (model, quant or ref_image) with the file part")
			return
		case errors.Is(err, io.EOF):
			bad("no file part: send a kind field and a file part")
			return
		case err != nil:
			u.bodyError(w, r, err)
			return
		}
		switch part.FormName() {
		case "kind":
			b, err := io.ReadAll(io.LimitReader(part, 65))
			if err != nil {
				u.bodyError(w, r, err)
				return
			}
			kind = strings.TrimSpace(string(b))
			if kind == "" {
				bad("the kind field is empty: send model, quant or ref_image")
				return
			}
			if spooled != nil {
				if _, err := spooled.Seek(0, io.SeekStart); err != nil {
					u.bodyError(w, r, err)
					return
				}
				u.stream(w, r, kind, spooledName, spooled, mr)
				return
			}
		case "file":
			if spooled != nil {
				bad(secondFile)
				return
			}
			if kind != "" {
				u.stream(w, r, kind, part.FileName(), part, mr)
				return
			}
			if spooled, err = os.CreateTemp("", "taskmesh-upload-*"); err != nil {
				httperr.WriteFor(w, r, httperr.New(http.StatusInternalServerError, httperr.CodeInternal, "spooling the upload failed"))
				u.log.Error("upload spool", "err", err)
				return
			}
			spooledName = part.FileName()
			if _, err := io.Copy(spooled, part); err != nil {
				u.bodyError(w, r, err)
				return
			}
		default:
			bad(fmt.Sprintf("unknown form field %q: send kind and file", part.FormName()))
			return
		}
	}
}

// secondFile refuses an upload with more than one file part.
const secondFile = "more than one file part: send one file per upload"

// stream sends one file (part, named filename by the client) to the
// scheduler and answers with its key. The body must end after it (rest
// holds no further part): the upload is kept only then, so that a second
// file is refused rather than silently dropped.
func (u *uploads) stream(w http.ResponseWriter, r *http.Request, kind, filename string, part io.Reader, rest *multipart.Reader) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := u.client.UploadJobInput(ctx)
	if err != nil {
		httperr.WriteFor(w, r, httperr.FromError(err))
		return
	}
	if err := stream.Send(&pipelinev1.UploadJobInputRequest{Part: &pipelinev1.UploadJobInputRequest_Header{
		Header: &pipelinev1.UploadHeader{Kind: kind, Filename: filename}}}); err != nil && !errors.Is(err, io.EOF) {
		httperr.WriteFor(w, r, httperr.FromError(err))
		return
	}
	buf := make([]byte, uploadChunk)
	for {
		n, rerr := fill(part, buf)
		if n > 0 {
			if err := stream.Send(&pipelinev1.UploadJobInputRequest{Part: &pipelinev1.UploadJobInputRequest_Chunk{
				Chunk: append([]byte(nil), buf[:n]...)}}); err != nil {
				// The scheduler ended the call (a refusal): its status
				// says why.
				_, err = stream.CloseAndRecv()
				httperr.WriteFor(w, r, httperr.FromError(err))
				return
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			cancel() // nothing is kept of an upload cut short
			u.bodyError(w, r, rerr)
			return
		}
	}
	switch next, err := rest.NextPart(); {
	case errors.Is(err, io.EOF):
	case err != nil:
		cancel()
		u.bodyError(w, r, err)
		return
	default:
		cancel() // the scheduler keeps nothing of a call that did not close
		msg := secondFile
		if next.FormName() != "file" {
			msg = fmt.Sprintf("unexpected form field %q after the file part: send one kind field and one file part", next.FormName())
		}
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, msg))
		return
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		httperr.WriteFor(w, r, httperr.FromError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"key": resp.GetKey(), "kind": resp.GetKind(), "size": resp.GetSize()})
}

// fill reads into buf until it is full or r ends; at r's end it returns
// io.EOF with what it read (a part cut short is io.ErrUnexpectedEOF from
// the multipart reader, an error).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// bodyError answers a request body that could not be read: too large
// (413) or broken (400).
func (u *uploads) bodyError(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		p := httperr.New(http.StatusRequestEntityTooLarge, httperr.CodeInvalidArgument,
			fmt.Sprintf("the request is larger than %d bytes", tooLarge.Limit))
		p.PipelineCode = httperr.PipelineRequestTooLarge
		httperr.WriteFor(w, r, p)
		return
	}
	httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, "reading the upload failed: "+err.Error()))
}

// bodyLimit bounds the request bodies of the pipeline API: uploads up to
// maxUpload, every other route as the task API's.
type bodyLimit struct {
	next      http.Handler
	maxUpload int64
}

func (b bodyLimit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	limit := int64(maxBodyBytes)
	if r.URL.Path == uploadRoute {
		limit = b.maxUpload
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	b.next.ServeHTTP(w, r)
}
