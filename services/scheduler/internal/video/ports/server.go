// Package ports serves taskmesh.video.v1.VideoService over gRPC: the
// request ↔ domain mapping, the one answer body that satisfies the
// document's three GET shapes, and the one place where the video API's
// errors become gRPC statuses (the gateway turns those into the video
// error body).
package ports

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	schedports "github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// Server serves videov1.VideoService.
type Server struct {
	videov1.UnimplementedVideoServiceServer
	App     *app.App
	Catalog domain.Catalog
	// Location is the time zone of gmtCreate and the other wall-clock
	// times (default DocumentZone).
	Location *time.Location
	Log      *slog.Logger
}

// requestID is the gateway's correlation id of the call, echoed in the
// body as request_id; a direct call without one gets a fresh id.
func requestID(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("x-request-id"); len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return uuid.NewString()
}

func (s *Server) CreateVideoGeneration(ctx context.Context, r *videov1.CreateVideoGenerationRequest) (*videov1.CreateVideoGenerationResponse, error) {
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	req, err := request(r)
	if err != nil {
		return nil, s.status(err)
	}
	t, err := s.App.Create(ctx, c, req)
	if err != nil {
		return nil, s.status(err)
	}
	return &videov1.CreateVideoGenerationResponse{RequestId: requestID(ctx),
		Output: &videov1.VideoGenerationOutput{TaskStatus: domain.StatusQueued, TaskId: t.ID}}, nil
}

// request maps the body; img_url is another name for image.
func request(r *videov1.CreateVideoGenerationRequest) (domain.Request, error) {
	in, p := r.GetInput(), r.GetParameters()
	img := in.GetImage()
	if u := in.GetImgUrl(); u != "" {
		if img != "" && img != u {
			return domain.Request{}, &domain.InvalidError{Field: "input.img_url", Reason: "give either image or img_url, not both"}
		}
		img = u
	}
	out := domain.Request{Model: r.GetModel(), Type: r.GetType(), Prompt: in.GetPrompt(), NegativePrompt: in.GetNegativePrompt(),
		Image: img, Resolution: p.GetResolution(), Webhook: r.GetWebhook().GetUrl()}
	if p == nil {
		return out, nil // every parameter takes its default
	}
	out.PromptExtend, out.Watermark, out.Seed = p.PromptExtend, p.Watermark, p.Seed
	if p.Duration != nil {
		d := int(p.GetDuration())
		out.Duration = &d
	}
	if p.VideoCount != nil {
		n := int(p.GetVideoCount())
		out.VideoCount = &n
	}
	return out, nil
}

func (s *Server) GetVideoGeneration(ctx context.Context, r *videov1.GetVideoGenerationRequest) (*videov1.GetVideoGenerationResponse, error) {
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	v, err := s.App.Get(ctx, c, r.GetTaskId())
	if err != nil {
		return nil, s.status(err)
	}
	id := requestID(ctx)
	return &videov1.GetVideoGenerationResponse{Success: true, Code: 200, RequestId: id, RequestIdCamel: id, Data: s.data(v)}, nil
}

// DocumentZone is the default zone of the video API's wall-clock times
// (docs/api/video.md#the-get-body): China Standard Time, UTC+8 all year
// round, so a fixed zone needs no time zone database. In it gmtCreate
// "2025-10-25 10:51:37" is gmtCreateTimeStamp 1761360697000 (02:51:37
// UTC).
var DocumentZone = time.FixedZone("CST", 8*60*60)

// Wall-clock formats of the video API's answers.
const (
	secondLayout = "2006-01-02 15:04:05"
	milliLayout  = "2006-01-02 15:04:05.000"
)

// data is the answer's data object. An UNKNOWN generation shows its id and
// status only, as the documented expired answer does.
func (s *Server) data(v app.View) *videov1.VideoGenerationTask {
	d := &videov1.VideoGenerationTask{TaskId: v.ID, TaskIdCamel: v.ID, TaskStatus: v.Status, TaskStatusCamel: v.Status}
	if v.Status == domain.StatusUnknown || v.Task.Spec.Video == nil {
		return d
	}
	t, spec := v.Task, v.Task.Spec.Video
	loc := s.Location
	if loc == nil {
		loc = DocumentZone
	}
	wall := func(at time.Time) *wrapperspb.StringValue {
		if at.IsZero() {
			return nil
		}
		return wrapperspb.String(at.In(loc).Format(milliLayout))
	}
	d.Id = ptr(app.DisplayID(t.ID))
	d.GmtCreate = ptr(t.CreatedAt.In(loc).Format(secondLayout))
	d.GmtCreateTimeStamp = ptr(float64(t.CreatedAt.UnixMilli()))
	d.SubmitTime = ptr(t.CreatedAt.In(loc).Format(milliLayout))
	if v.Status != domain.StatusQueued {
		started := t.StartedAt
		if started.IsZero() {
			started = t.AssignedAt
		}
		d.ScheduledTime = wall(started)
	}
	switch v.Status {
	case domain.StatusSucceeded, domain.StatusFailed, domain.StatusCanceled:
		d.CompletedTime = wall(t.EndedAt)
	}
	d.Model = ptr(s.Catalog.DisplayName(spec.Model))
	d.TaskType = ptr(spec.Type)
	d.TaskProgress = ptr(int32(t.Progress))
	if v.Status == domain.StatusSucceeded {
		d.TaskProgress = ptr(int32(100))
	}
	d.MediaType = ptr("video")
	in := &videov1.VideoGenerationTaskInput{Prompt: spec.Prompt, Resolution: domain.ResolutionLabel(spec.Resolution),
		Duration: int32(spec.Duration), VideoCount: 1, Seed: int32(spec.Seed)}
	if spec.PromptExtend {
		in.ActualPrompt = ptr(spec.ActualPrompt)
	}
	if v.VideoURL != "" {
		in.VideoUrl = wrapperspb.String(v.VideoURL)
	}
	d.TaskInput = in
	if v.Status == domain.StatusFailed {
		d.Code, d.Message = ptr(v.FailCode), ptr(v.FailMessage)
	}
	return d
}

func ptr[T any](v T) *T { return &v }

func (s *Server) DeleteVideoGeneration(ctx context.Context, r *videov1.DeleteVideoGenerationRequest) (*videov1.DeleteVideoGenerationResponse, error) {
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.App.Delete(ctx, c, r.GetTaskId())
	if err != nil {
		return nil, s.status(err)
	}
	return &videov1.DeleteVideoGenerationResponse{RequestId: requestID(ctx),
		Output: &videov1.VideoGenerationOutput{TaskStatus: st, TaskId: r.GetTaskId()}}, nil
}

// Video API codes of the refused DELETEs (HTTP 409).
const (
	CodeTaskRunning  = "UnsupportedOperation.TaskRunning"
	CodeTaskCanceled = "UnsupportedOperation.TaskCanceled"
)

// status maps an error of the video use cases to a gRPC status: the only
// place that does. A refused DELETE carries its video API code in the
// ErrorInfo's "video_code" metadata, next to the task API's code (30002,
// HTTP 409); everything else is mapped as the scheduler maps it.
func (s *Server) status(err error) error {
	var invalid *domain.InvalidError
	switch {
	case errors.As(err, &invalid):
		return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", err.Error(),
			&errdetails.BadRequest_FieldViolation{Field: invalid.Field, Description: invalid.Reason})
	case errors.Is(err, domain.ErrTaskRunning):
		return refusal(CodeTaskRunning, err.Error())
	case errors.Is(err, domain.ErrTaskCanceled):
		return refusal(CodeTaskCanceled, err.Error())
	case errors.Is(err, domain.ErrForbidden), errors.Is(err, app.ErrNoTenant):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, app.ErrNoObjectStore):
		return status.Error(codes.Unavailable, err.Error())
	}
	return schedports.ToStatus(s.Log, err)
}

func refusal(videoCode, msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: grpcserver.ErrorDomain, Reason: "TASK_IMMUTABLE",
		Metadata: map[string]string{"code": strconv.Itoa(int(taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE)), "video_code": videoCode}}); err == nil {
		st = d
	}
	return st.Err()
}
