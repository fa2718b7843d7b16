// Package grpcserver builds the gRPC servers of Taskmesh's internal
// services with the same interceptor chain everywhere: panic recovery,
// tracing, internal authentication (package authn) and request validation
// against the protos' protovalidate rules.
package grpcserver

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/otel"
)

// Business codes the platform itself answers with (see taskv1.ErrorCode).
const (
	CodeInvalidArgument = 30005
	CodeInternal        = 30099
	// ErrorDomain is the google.rpc.ErrorInfo domain of business codes.
	ErrorDomain = "taskmesh"
)

// Options configures New.
type Options struct {
	// InternalToken is required on every call (authn); "" refuses all.
	InternalToken string
	Logger        *slog.Logger
	// Extra server options (e.g. keepalive, message sizes).
	Extra []grpc.ServerOption
	// Authorize, if set, runs on every unary call after authentication and
	// before validation: a caller that may not call a method learns that
	// before whether its request was valid. Its error is the call's.
	Authorize func(ctx context.Context, fullMethod string) error
}

// MaxRecvMsgBytes bounds a request message. gRPC's default (4 MiB) is too
// small for the video API, whose requests carry a first frame of up to 10 MB
// as a base64 data: URI (about 13.4 MB), and a frame over that limit must
// reach the scheduler to be refused with its field's error: the REST
// facade passes video bodies of up to 32 MiB, and the message made of one
// is no larger than the JSON it came in.
const MaxRecvMsgBytes = 32 << 20

// Server is a gRPC server plus its health service.
type Server struct {
	*grpc.Server
	Health *health.Server
}

// New returns a server with the standard chain and the health and
// reflection services registered.
func New(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// Every server of the process validates with protovalidate's shared
	// validator: the rules compiled for a message are the same for all of
	// them, and a validator of each server's own compiled and cached them
	// once more per server (docs/decisions/0129-one-openapi-document-and-validator-per-process.md).
	v := protovalidate.GlobalValidator
	opts := append([]grpc.ServerOption{
		otel.ServerOption(),
		grpc.MaxRecvMsgSize(MaxRecvMsgBytes),
		grpc.ChainUnaryInterceptor(unaryChain(o, v)...),
		grpc.ChainStreamInterceptor(recoverStream(o.Logger), authn.StreamServerInterceptor(o.InternalToken), validateStream(v)),
	}, o.Extra...)
	s := &Server{Server: grpc.NewServer(opts...), Health: health.NewServer()}
	healthpb.RegisterHealthServer(s.Server, s.Health)
	reflection.Register(s.Server)
	return s, nil
}

// unaryChain is the interceptors of every unary call, in order; Local
// runs the same ones.
func unaryChain(o Options, v protovalidate.Validator) []grpc.UnaryServerInterceptor {
	chain := []grpc.UnaryServerInterceptor{recoverUnary(o.Logger), authn.UnaryServerInterceptor(o.InternalToken)}
	if o.Authorize != nil {
		chain = append(chain, authorizeUnary(o.Authorize))
	}
	return append(chain, validateUnary(v, o.Logger))
}

func authorizeUnary(authorize func(context.Context, string) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Status builds a status carrying a business code in ErrorInfo metadata
// {"code": "<code>"}; the gateway turns it into the REST error envelope.
func Status(c codes.Code, code int, reason, msg string, fields ...*errdetails.BadRequest_FieldViolation) error {
	st := status.New(c, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: reason,
		Metadata: map[string]string{"code": strconv.Itoa(code)}}}
	if len(fields) > 0 {
		details = append(details, &errdetails.BadRequest{FieldViolations: fields})
	}
	if s, err := st.WithDetails(details...); err == nil {
		st = s
	}
	return st.Err()
}

// validationError describes every violated rule of a request.
func validationError(err error, log *slog.Logger) error {
	var ve *protovalidate.ValidationError
	if !errors.As(err, &ve) {
		log.Error("request validation could not run", "err", err)
		return Status(codes.Internal, CodeInternal, "INTERNAL", "internal error")
	}
	fields := make([]*errdetails.BadRequest_FieldViolation, 0, len(ve.Violations))
	for _, viol := range ve.Violations {
		if msg, ok := inWords(viol.Proto.GetMessage()); ok {
			viol.Proto.Message = &msg
		}
		fields = append(fields, &errdetails.BadRequest_FieldViolation{
			Field: protovalidate.FieldPathString(viol.Proto.GetField()), Description: viol.Proto.GetMessage()})
	}
	return Status(codes.InvalidArgument, CodeInvalidArgument, "INVALID_ARGUMENT", ve.Error(), fields...)
}

// inWords rewrites protovalidate's messages that show a rule's source (a
// value list, a regular expression) as what the value must be, so an API
// caller and a ctl user read the rule rather than its syntax.
func inWords(msg string) (string, bool) {
	if out, ok := listedValues(msg); ok {
		return out, true
	}
	return patternWords(msg)
}

// notMatched is protovalidate's message for a string outside its field's
// pattern.
var notMatched = regexp.MustCompile("^does not match regex pattern `(.*)`$")

// patternInWords says in words what each pattern of proto/ accepts. A
// pattern missing here is still told (as the expression); a test walks
// every registered message and fails on one without words, so a new
// pattern comes with its description.
var patternInWords = map[string]string{
	`^[a-z0-9][a-z0-9_-]{0,62}$`:                                  "must be 1 to 63 lower-case letters, digits, '_' or '-', starting with a letter or digit",
	`^([a-z0-9][a-z0-9_-]{0,62})?$`:                               "must be 1 to 63 lower-case letters, digits, '_' or '-', starting with a letter or digit (or left out)",
	`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`:                        "must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit",
	`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)?$`:                     "must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit (or left out)",
	`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`:                            "must be lower-case letters, digits, '.' or '-', starting and ending with a letter or digit",
	`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`:                           "must be 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit",
	`^([A-Za-z0-9][A-Za-z0-9_.-]{0,62})?$`:                        "must be 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit (or left out)",
	`^[A-Za-z0-9][A-Za-z0-9._/-]*$`:                               "must be letters, digits, '.', '_', '/' or '-', starting with a letter or digit",
	`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`:                              "must be letters, digits, '.', '_', ':', '/' or '-', starting with a letter or digit",
	`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`:                         "must be 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
	`^[A-Za-z_][A-Za-z0-9_]*$`:                                    "must be letters, digits or '_', not starting with a digit",
	`^([0-9a-f]{64})?$`:                                           "must be 64 lower-case hexadecimal digits, a SHA-256 (or left out)",
	`^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$`: "must be a quantity: a number with an optional suffix m, k, M, G, T, P, Ki, Mi, Gi, Ti or Pi, such as 2, 0.5, 500m or 16Gi",
}

// patternWords words protovalidate's "does not match regex pattern `…`"
// by patternInWords.
func patternWords(msg string) (string, bool) {
	m := notMatched.FindStringSubmatch(msg)
	if m == nil {
		return msg, false
	}
	words, ok := patternInWords[m[1]]
	if !ok {
		return msg, false
	}
	return words, true
}

// inList is protovalidate's message for a value outside a field's `in`
// list.
var inList = regexp.MustCompile(`^must be in list \[(.*)\]$`)

// listedValues words protovalidate's "must be in list [, always,
// on-failure, never]", whose first element is the empty value a field may
// be left at, as "must be always, on-failure or never (or left out)".
func listedValues(msg string) (string, bool) {
	m := inList.FindStringSubmatch(msg)
	if m == nil {
		return msg, false
	}
	var values []string
	optional := false
	for _, v := range strings.Split(m[1], ", ") {
		if v == "" {
			optional = true
			continue
		}
		values = append(values, v)
	}
	if len(values) == 0 {
		return msg, false
	}
	out := values[0]
	if n := len(values); n > 1 {
		out = strings.Join(values[:n-1], ", ") + " or " + values[n-1]
	}
	if optional {
		out += " (or left out)"
	}
	return "must be " + out, true
}

// Validate checks m against its protovalidate rules and returns nil or the
// status validateUnary answers with (InvalidArgument, business code
// CodeInvalidArgument, one field violation per broken rule). It is for
// handlers called without the interceptor chain, e.g. by grpc-gateway's
// in-process handlers.
func Validate(v protovalidate.Validator, m proto.Message, log *slog.Logger) error {
	if err := v.Validate(m); err != nil {
		return validationError(err, log)
	}
	return nil
}

func validateUnary(v protovalidate.Validator, log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m, ok := req.(proto.Message); ok {
			if err := v.Validate(m); err != nil {
				return nil, validationError(err, log)
			}
		}
		return handler(ctx, req)
	}
}

// validateStream validates each message a client sends on a stream.
func validateStream(v protovalidate.Validator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, v: v})
	}
}

type validatingStream struct {
	grpc.ServerStream
	v protovalidate.Validator
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		if err := s.v.Validate(pm); err != nil {
			return validationError(err, slog.New(slog.DiscardHandler))
		}
	}
	return nil
}

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = Status(codes.Internal, CodeInternal, "INTERNAL", "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = Status(codes.Internal, CodeInternal, "INTERNAL", "internal error")
			}
		}()
		return handler(srv, ss)
	}
}

// Code returns the business code err carries (the ErrorInfo of domain
// ErrorDomain that Status writes), or 0 when it carries none: nil, a
// transport failure, a plain gRPC status.
func Code(err error) int {
	if info := Info(err); info != nil {
		if n, err := strconv.Atoi(info.GetMetadata()["code"]); err == nil {
			return n
		}
	}
	return 0
}

// Info returns the ErrorInfo of domain ErrorDomain err carries, or nil.
func Info(err error) *errdetails.ErrorInfo {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info
		}
	}
	return nil
}
