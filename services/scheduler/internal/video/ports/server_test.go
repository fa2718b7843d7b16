package ports

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

func TestRequest(t *testing.T) {
	five, yes := int32(5), true
	r, err := request(&videov1.CreateVideoGenerationRequest{Model: "m", Input: &videov1.VideoGenerationInput{Prompt: "p", ImgUrl: "http://a"},
		Parameters: &videov1.VideoGenerationParameters{Duration: &five, Watermark: &yes}})
	if err != nil || r.Image != "http://a" || *r.Duration != 5 || !*r.Watermark || r.PromptExtend != nil || r.Seed != nil {
		t.Errorf("request = %+v, %v", r, err)
	}
	// No parameters at all: every default applies.
	if r, err := request(&videov1.CreateVideoGenerationRequest{Model: "m"}); err != nil || r.Duration != nil || r.Resolution != "" {
		t.Errorf("without parameters: %+v, %v", r, err)
	}
	_, err = request(&videov1.CreateVideoGenerationRequest{Input: &videov1.VideoGenerationInput{Image: "http://a", ImgUrl: "http://b"}})
	var inv *domain.InvalidError
	if !errors.As(err, &inv) || inv.Field != "input.img_url" {
		t.Errorf("image and img_url: %v", err)
	}
}

func TestStatusMapsEveryError(t *testing.T) {
	s := &Server{Log: slog.New(slog.DiscardHandler)}
	tests := []struct {
		err       error
		code      codes.Code
		videoCode string
	}{
		{&domain.InvalidError{Field: "input.prompt", Reason: "is required"}, codes.InvalidArgument, ""},
		{fmt.Errorf("wrapped: %w", domain.ErrTaskRunning), codes.FailedPrecondition, CodeTaskRunning},
		{domain.ErrTaskCanceled, codes.FailedPrecondition, CodeTaskCanceled},
		{domain.ErrForbidden, codes.PermissionDenied, ""},
		{app.ErrNoTenant, codes.PermissionDenied, ""},
		{app.ErrNoObjectStore, codes.Unavailable, ""},
		{task.ErrNotFound, codes.NotFound, ""},
		{errors.New("boom"), codes.Internal, ""},
	}
	for _, tc := range tests {
		st := status.Convert(s.status(tc.err))
		got := ""
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				got = info.GetMetadata()["video_code"]
			}
		}
		if st.Code() != tc.code || got != tc.videoCode {
			t.Errorf("%v → %s %q, want %s %q", tc.err, st.Code(), got, tc.code, tc.videoCode)
		}
	}
}

func TestData(t *testing.T) {
	c, _ := domain.NewCatalog(domain.DefaultModels())
	s := &Server{Catalog: c} // the default zone reproduces the documented example
	if d := s.data(app.View{ID: "x", Status: domain.StatusUnknown}); d.TaskInput != nil || d.GmtCreate != nil || d.TaskIdCamel != "x" || d.TaskStatusCamel != "UNKNOWN" {
		t.Errorf("unknown = %v", d)
	}
	created := time.Date(2025, 10, 25, 2, 51, 37, 0, time.UTC)
	tk := task.Task{ID: "id", CreatedAt: created, StartedAt: created.Add(time.Minute), EndedAt: created.Add(2 * time.Minute), Progress: 30,
		Spec: task.Spec{Type: task.TypeVideo, Video: &task.Video{Model: "wan2.2-t2v", Type: "text_to_video", Prompt: "p", Resolution: "720P", Duration: 5, Seed: 10}}}
	d := s.data(app.View{ID: "id", Status: domain.StatusFailed, Task: tk, FailCode: "InvalidParameter", FailMessage: "bad"})
	if d.GetGmtCreate() != "2025-10-25 10:51:37" || d.GetGmtCreateTimeStamp() != 1761360697000 || d.GetSubmitTime() != "2025-10-25 10:51:37.000" ||
		d.GetScheduledTime().GetValue() != "2025-10-25 10:52:37.000" || d.GetCompletedTime().GetValue() != "2025-10-25 10:53:37.000" ||
		d.GetModel() != "Wan2.2-T2V-14B" || d.GetCode() != "InvalidParameter" || d.GetMessage() != "bad" || d.GetTaskProgress() != 30 ||
		d.GetTaskInput().GetResolution() != "720" || d.GetTaskInput().ActualPrompt != nil {
		t.Errorf("failed = %v", d)
	}
}
