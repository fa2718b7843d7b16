// Package httperr is the one place where the gateway turns errors into HTTP
// answers: the documented envelope {"code":…,"message":…,"data":null}
// (docs/api/README.md#the-error-envelope), with the business code separate
// from the HTTP status.
//
// A gRPC status from an internal service is mapped by its
// google.rpc.ErrorInfo (domain "taskmesh", metadata "code", or the reason
// naming a taskmesh.task.v1.ErrorCode) when it has one, else by its gRPC
// code. Messages of 5xx answers are replaced by a generic text: they may
// carry internal details (SQL, addresses), which the caller must not see and
// the gateway logs instead.
package httperr

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// Domain is the ErrorInfo domain of Taskmesh's business errors.
const Domain = "taskmesh"

// Business codes (taskv1.ErrorCode) and the transport-level codes, which
// reuse the HTTP status because the API defines no business code for them.
const (
	CodeAttemptMismatch = int(taskv1.ErrorCode_ERROR_CODE_ATTEMPT_MISMATCH)    // 30001
	CodeTaskImmutable   = int(taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE)      // 30002
	CodeLeaseExpired    = int(taskv1.ErrorCode_ERROR_CODE_LEASE_EXPIRED)       // 30003
	CodeTaskNotFound    = int(taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND)      // 30004
	CodeInvalidArgument = int(taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)    // 30005
	CodeAlreadyExists   = int(taskv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS)      // 30006
	CodeGUQuotaMissing  = int(taskv1.ErrorCode_ERROR_CODE_GU_QUOTA_NOT_EXISTS) // 30010
	CodeGUQuotaCreating = int(taskv1.ErrorCode_ERROR_CODE_GU_QUOTA_CREATING)   // 30011
	CodeInternal        = int(taskv1.ErrorCode_ERROR_CODE_INTERNAL)            // 30099

	// The quota service's codes (quotav1.ErrorCode).
	CodeInventoryInsufficient = int(quotav1.ErrorCode_ERROR_CODE_INVENTORY_INSUFFICIENT) // 31003
	CodeQuotaNotFound         = int(quotav1.ErrorCode_ERROR_CODE_QUOTA_NOT_FOUND)        // 31004
	CodeQuotaExists           = int(quotav1.ErrorCode_ERROR_CODE_QUOTA_EXISTS)           // 31005
	CodeQuotaConflict         = int(quotav1.ErrorCode_ERROR_CODE_QUOTA_CONFLICT)         // 31006

	// The consumers service's and the dead-letter API's.
	CodeDeliveryNotFound   = int(webhookv1.ErrorCode_ERROR_CODE_DELIVERY_NOT_FOUND)       // 32004
	CodeDeadLetterNotFound = int(deadletterv1.ErrorCode_ERROR_CODE_DEAD_LETTER_NOT_FOUND) // 33004

	CodeUnauthenticated  = http.StatusUnauthorized     // 401
	CodePermissionDenied = http.StatusForbidden        // 403
	CodeNoRoute          = http.StatusNotFound         // 404
	CodeMethodNotAllowed = http.StatusMethodNotAllowed // 405
	CodeTooManyRequests  = http.StatusTooManyRequests  // 429
	CodeConflict         = http.StatusConflict         // 409
	// CodeTooLarge: the request body is over the route's limit.
	CodeTooLarge = http.StatusRequestEntityTooLarge // 413
	// CodeUnsupportedMediaType: a body that is not JSON on a JSON route.
	CodeUnsupportedMediaType = http.StatusUnsupportedMediaType // 415
)

// Code documents one value of the envelope's code field.
type Code struct {
	Code       int
	HTTPStatus int
	Meaning    string
}

// Codes lists every code the gateway answers with, for the OpenAPI
// document. The business rows are the table of
// docs/api/tasks.md#business-codes.
var Codes = []Code{
	{CodeAttemptMismatch, http.StatusConflict, "attempt_id is not the task's current attempt"},
	{CodeTaskImmutable, http.StatusConflict, "the task is final or cannot change this way"},
	{CodeLeaseExpired, http.StatusGone, "the lease has expired"},
	{CodeTaskNotFound, http.StatusNotFound, "no such task for this caller"},
	{CodeInvalidArgument, http.StatusBadRequest, "malformed request, unknown field or out-of-range value"},
	{CodeAlreadyExists, http.StatusConflict, "something with that id already exists (a template id the tenant uses)"},
	{CodeGUQuotaMissing, http.StatusBadRequest, "GU_QUOTA_NOT_EXISTS: GPU work names a GU quota the tenant does not have"},
	{CodeGUQuotaCreating, http.StatusConflict, "GU_QUOTA_CREATING: the GU quota's WorkGroup is not running yet; retry later"},
	{CodeInventoryInsufficient, http.StatusConflict, "the cluster has too few free GPUs for the quota; nothing was created"},
	{CodeQuotaNotFound, http.StatusNotFound, "no such tenant, cluster, quota or WorkGroup for this caller"},
	{CodeQuotaExists, http.StatusConflict, "a tenant, cluster or quota of that name already exists"},
	{CodeQuotaConflict, http.StatusConflict, "the quota's state does not allow the change (e.g. it is being unsubscribed)"},
	{CodeDeliveryNotFound, http.StatusNotFound, "no such webhook delivery for this caller"},
	{CodeDeadLetterNotFound, http.StatusNotFound, "no such dead letter (applied by a retry, or dropped)"},
	{CodeInternal, http.StatusInternalServerError, "internal error (503 when a service is unavailable)"},
	{CodeUnauthenticated, http.StatusUnauthorized, "missing, unknown, expired or revoked credential"},
	{CodePermissionDenied, http.StatusForbidden, "credential of the wrong kind for this route, or agent token used from a disallowed address"},
	{CodeNoRoute, http.StatusNotFound, "no such route"},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed, "route exists, method does not"},
	{CodeTooLarge, http.StatusRequestEntityTooLarge, "request body over the route's limit"},
	{CodeUnsupportedMediaType, http.StatusUnsupportedMediaType, "request body is not JSON (Content-Type)"},
	{CodeTooManyRequests, http.StatusTooManyRequests, "rate limit or quota exceeded"},
	{CodeConflict, http.StatusConflict, "admin API: the tenant already exists"},
}

// businessStatus is the HTTP status of each business code.
var businessStatus = map[int]int{
	CodeAttemptMismatch: http.StatusConflict,
	CodeTaskImmutable:   http.StatusConflict,
	CodeLeaseExpired:    http.StatusGone,
	CodeTaskNotFound:    http.StatusNotFound,
	CodeInvalidArgument: http.StatusBadRequest,
	CodeAlreadyExists:   http.StatusConflict,
	CodeGUQuotaMissing:  http.StatusBadRequest,
	CodeGUQuotaCreating: http.StatusConflict,
	CodeInternal:        http.StatusInternalServerError,

	CodeInventoryInsufficient: http.StatusConflict,
	CodeQuotaNotFound:         http.StatusNotFound,
	CodeQuotaExists:           http.StatusConflict,
	CodeQuotaConflict:         http.StatusConflict,

	CodeDeliveryNotFound:   http.StatusNotFound,
	CodeDeadLetterNotFound: http.StatusNotFound,
}

// Problem is one error answer.
type Problem struct {
	HTTPStatus int
	Code       int
	// VideoCode, if set, is the code shown on the video API's routes
	// instead of the one derived from HTTPStatus (see WriteFor).
	VideoCode string
	// PipelineCode, if set, is the code shown on the pipeline API's
	// routes (e.g. JOB_NOT_FOUND) instead of the one derived from
	// HTTPStatus.
	PipelineCode string
	// Message is what the caller sees.
	Message string
	// Detail is the original message, for the log; it may differ from
	// Message for 5xx answers.
	Detail string
}

// Envelope is the JSON body of every error answer. Data is always null.
type Envelope struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data"`
}

// New returns a problem whose message the gateway wrote itself and which is
// shown as is, even for 5xx.
func New(httpStatus, code int, message string) Problem {
	return Problem{HTTPStatus: httpStatus, Code: code, Message: message, Detail: message}
}

// FromStatus maps a gRPC status to the answer (see the package doc).
func FromStatus(st *status.Status) Problem {
	p := fromCode(st.Code())
	p.Message, p.Detail = st.Message(), st.Message()
	p.VideoCode = videoCodeOf(st)
	p.PipelineCode = metadataOf(st, "pipeline_code")
	if p.PipelineCode == PipelineRequestTooLarge {
		p.HTTPStatus = http.StatusRequestEntityTooLarge
	}
	if code, ok := businessCode(st); ok {
		p.Code = code
		// An unknown business code (a newer service) keeps the status of
		// its gRPC code.
		if s, known := businessStatus[code]; known {
			p.HTTPStatus = s
		}
	}
	return hide(p)
}

// FromError maps any error: a gRPC status error by FromStatus, anything
// else as an internal error.
func FromError(err error) Problem {
	return FromStatus(status.Convert(err))
}

// fromCode is the mapping used when a status has no ErrorInfo.
func fromCode(c codes.Code) Problem {
	switch c {
	case codes.InvalidArgument:
		return Problem{HTTPStatus: http.StatusBadRequest, Code: CodeInvalidArgument}
	case codes.NotFound:
		return Problem{HTTPStatus: http.StatusNotFound, Code: CodeTaskNotFound}
	case codes.Aborted:
		return Problem{HTTPStatus: http.StatusConflict, Code: CodeAttemptMismatch}
	case codes.FailedPrecondition:
		return Problem{HTTPStatus: http.StatusConflict, Code: CodeTaskImmutable}
	case codes.Unauthenticated:
		return Problem{HTTPStatus: http.StatusUnauthorized, Code: CodeUnauthenticated}
	case codes.PermissionDenied:
		return Problem{HTTPStatus: http.StatusForbidden, Code: CodePermissionDenied}
	case codes.AlreadyExists:
		return Problem{HTTPStatus: http.StatusConflict, Code: CodeConflict}
	case codes.ResourceExhausted:
		return Problem{HTTPStatus: http.StatusTooManyRequests, Code: CodeTooManyRequests}
	case codes.Unavailable:
		return Problem{HTTPStatus: http.StatusServiceUnavailable, Code: CodeInternal}
	default:
		return Problem{HTTPStatus: http.StatusInternalServerError, Code: CodeInternal}
	}
}

// businessCode finds the taskmesh ErrorInfo of st: metadata "code" first,
// else the reason as an ErrorCode name without its prefix.
func businessCode(st *status.Status) (int, bool) {
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		if c, err := strconv.Atoi(info.GetMetadata()["code"]); err == nil && c > 0 {
			return c, true
		}
		if c, ok := taskv1.ErrorCode_value["ERROR_CODE_"+info.GetReason()]; ok && c != 0 {
			return int(c), true
		}
	}
	return 0, false
}

// videoCodeOf is the video API code a service chose for st (ErrorInfo
// metadata "video_code"), e.g. UnsupportedOperation.TaskRunning for a
// refused DELETE; "" lets WriteFor derive it from the HTTP status.
func videoCodeOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			if c := info.GetMetadata()["video_code"]; c != "" {
				return c
			}
		}
	}
	return ""
}

// metadataOf is the value of key in st's taskmesh ErrorInfo, "" if none.
func metadataOf(st *status.Status, key string) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			if v := info.GetMetadata()[key]; v != "" {
				return v
			}
		}
	}
	return ""
}

// hide replaces the message of 5xx answers that came from elsewhere.
func hide(p Problem) Problem {
	switch {
	case p.HTTPStatus == http.StatusServiceUnavailable:
		p.Message = "service unavailable"
	case p.HTTPStatus >= 500:
		p.Message = "internal error"
	}
	return p
}

// Write sends p as the envelope. A 401 also names the scheme the client
// should use (RFC 6750).
func Write(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.HTTPStatus == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="taskmesh"`)
	}
	w.WriteHeader(p.HTTPStatus)
	// Encoding a struct of an int and a string cannot fail; a write error
	// means the client has gone.
	_ = json.NewEncoder(w).Encode(Envelope{Code: p.Code, Message: p.Message})
}

// The video API has its own error body with string codes
// (docs/api/video.md#errors):
// {"code":"InvalidApiKey","message":…,"request_id":…}.
const (
	VideoInvalidAPIKey    = "InvalidApiKey"
	VideoInvalidParameter = "InvalidParameter"
	VideoAccessDenied     = "AccessDenied"
	VideoNotFound         = "NotFound"
	VideoMethodNotAllowed = "MethodNotAllowed"
	VideoThrottling       = "Throttling"
	VideoInternalError    = "InternalError"
	VideoUnavailable      = "ServiceUnavailable"
)

// Video API codes of a refused DELETE (409): the task is running, or it is
// canceled (removed automatically 24 hours after submission).
const (
	VideoTaskRunning  = "UnsupportedOperation.TaskRunning"
	VideoTaskCanceled = "UnsupportedOperation.TaskCanceled"
)

// VideoCode documents one code of the video API's error body.
type VideoCode struct {
	Code       string
	HTTPStatus int
	Meaning    string
}

// VideoCodes lists every code the video API answers with, for the OpenAPI
// document.
var VideoCodes = []VideoCode{
	{VideoInvalidParameter, http.StatusBadRequest, "a parameter is missing or out of range, or a string holds NUL or invalid UTF-8; the message names it"},
	{VideoInvalidParameter, http.StatusRequestEntityTooLarge, "the request body is over 32 MB"},
	{VideoInvalidParameter, http.StatusUnsupportedMediaType, "the request body is not JSON (Content-Type)"},
	{VideoInvalidAPIKey, http.StatusUnauthorized, "missing, unknown, expired or revoked API key"},
	{VideoAccessDenied, http.StatusForbidden, "the task belongs to another tenant, or the credential may not call this API"},
	{VideoNotFound, http.StatusNotFound, "no such route (an unknown task is not an error: its status is UNKNOWN)"},
	{VideoMethodNotAllowed, http.StatusMethodNotAllowed, "route exists, method does not"},
	{VideoTaskRunning, http.StatusConflict, "DELETE of a RUNNING task: it can be neither canceled nor deleted"},
	{VideoTaskCanceled, http.StatusConflict, "DELETE of a CANCELED task: it is removed automatically 24 hours after submission"},
	{VideoThrottling, http.StatusTooManyRequests, "rate limit exceeded"},
	{VideoInternalError, http.StatusInternalServerError, "internal error"},
	{VideoUnavailable, http.StatusServiceUnavailable, "a service is unavailable; retry later"},
}

// VideoEnvelope is the error body of the video API.
type VideoEnvelope struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

// invalidAPIKeyMessage is the documented message of InvalidApiKey.
const invalidAPIKeyMessage = "Invalid API-key provided."

// IsVideoPath reports whether path belongs to the video API, whose errors
// use VideoEnvelope.
func IsVideoPath(path string) bool {
	return strings.HasPrefix(path, "/v1/video/") || strings.HasPrefix(path, "/api/v1/video/")
}

// videoCode derives a video API code from the HTTP status.
func videoCode(httpStatus int) string {
	switch httpStatus {
	case http.StatusBadRequest:
		return VideoInvalidParameter
	case http.StatusUnauthorized:
		return VideoInvalidAPIKey
	case http.StatusForbidden:
		return VideoAccessDenied
	case http.StatusNotFound:
		return VideoNotFound
	case http.StatusMethodNotAllowed:
		return VideoMethodNotAllowed
	case http.StatusTooManyRequests:
		return VideoThrottling
	case http.StatusServiceUnavailable:
		return VideoUnavailable
	}
	if httpStatus >= 500 {
		return VideoInternalError
	}
	return VideoInvalidParameter
}

// WriteFor sends p in the error body of the API r belongs to: the video
// API's VideoEnvelope on its routes, the pipeline API's PipelineEnvelope on
// its routes, the task API's envelope everywhere else. Headers are the same
// as Write's.
func WriteFor(w http.ResponseWriter, r *http.Request, p Problem) {
	if IsPipelinePath(r.URL.Path) {
		writePipeline(w, p)
		return
	}
	if !IsVideoPath(r.URL.Path) {
		Write(w, p)
		return
	}
	code, msg := p.VideoCode, p.Message
	if code == "" {
		code = videoCode(p.HTTPStatus)
	}
	if code == VideoInvalidAPIKey {
		msg = invalidAPIKeyMessage
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.HTTPStatus == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="taskmesh"`)
	}
	w.WriteHeader(p.HTTPStatus)
	_ = json.NewEncoder(w).Encode(VideoEnvelope{Code: code, Message: msg, RequestID: requestid.FromContext(r.Context())})
}

// The pipeline API (docs/api/pipeline.md) answers errors as
// {"code": string, "message": string}: JOB_NOT_FOUND for an unknown job
// (another tenant's too), the video API's style of codes otherwise.
const (
	PipelineJobNotFound      = "JOB_NOT_FOUND"
	PipelineInvalidParameter = "InvalidParameter"
	PipelineInvalidAPIKey    = "InvalidApiKey"
	PipelineAccessDenied     = "AccessDenied"
	PipelineNotFound         = "NotFound"
	PipelineMethodNotAllowed = "MethodNotAllowed"
	PipelineRequestTooLarge  = "RequestTooLarge"
	PipelineThrottling       = "Throttling"
	PipelineInternalError    = "InternalError"
	PipelineUnavailable      = "ServiceUnavailable"
)

// PipelineCodes lists every code of the pipeline API's error body, for the
// OpenAPI document.
var PipelineCodes = []VideoCode{
	{PipelineInvalidParameter, http.StatusBadRequest, "malformed JSON, an unknown field, a missing key, an upload of another kind or one that expired, a bad upload; the message says which (a key that names no upload of the caller's is taken, and the stage that needs it fails the job)"},
	{PipelineInvalidAPIKey, http.StatusUnauthorized, "missing, unknown, expired or revoked API key"},
	{PipelineAccessDenied, http.StatusForbidden, "a credential that may not call this API (agent tokens, operator keys)"},
	{PipelineJobNotFound, http.StatusNotFound, "no such job for this caller (another tenant's job is not found either)"},
	{PipelineNotFound, http.StatusNotFound, "no such route"},
	{PipelineMethodNotAllowed, http.StatusMethodNotAllowed, "route exists, method does not"},
	{PipelineRequestTooLarge, http.StatusRequestEntityTooLarge, "an upload above its kind's size limit, or a body over the route's cap; nothing was kept"},
	{PipelineInvalidParameter, http.StatusUnsupportedMediaType, "a body that is not JSON on a JSON route"},
	{PipelineThrottling, http.StatusTooManyRequests, "rate limit exceeded"},
	{PipelineInternalError, http.StatusInternalServerError, "internal error"},
	{PipelineUnavailable, http.StatusServiceUnavailable, "a service is unavailable; retry later"},
}

// PipelineEnvelope is the error body of the pipeline API.
type PipelineEnvelope struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IsPipelinePath reports whether path belongs to the pipeline API, whose
// errors use PipelineEnvelope.
func IsPipelinePath(path string) bool { return path == "/jobs" || strings.HasPrefix(path, "/jobs/") }

// pipelineCode derives a pipeline API code from the HTTP status.
func pipelineCode(httpStatus int) string {
	switch httpStatus {
	case http.StatusBadRequest:
		return PipelineInvalidParameter
	case http.StatusUnauthorized:
		return PipelineInvalidAPIKey
	case http.StatusForbidden:
		return PipelineAccessDenied
	case http.StatusNotFound:
		return PipelineNotFound
	case http.StatusMethodNotAllowed:
		return PipelineMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return PipelineRequestTooLarge
	case http.StatusTooManyRequests:
		return PipelineThrottling
	case http.StatusServiceUnavailable:
		return PipelineUnavailable
	}
	if httpStatus >= 500 {
		return PipelineInternalError
	}
	return PipelineInvalidParameter
}

func writePipeline(w http.ResponseWriter, p Problem) {
	code := p.PipelineCode
	if code == "" {
		code = pipelineCode(p.HTTPStatus)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.HTTPStatus == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="taskmesh"`)
	}
	w.WriteHeader(p.HTTPStatus)
	_ = json.NewEncoder(w).Encode(PipelineEnvelope{Code: code, Message: p.Message})
}
