package schedulertest

import (
	"context"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
)

// videoServer stands in for the scheduler's VideoService.
type videoServer struct {
	videov1.UnimplementedVideoServiceServer
	f *Fake
}

func (s *videoServer) CreateVideoGeneration(ctx context.Context, r *videov1.CreateVideoGenerationRequest) (*videov1.CreateVideoGenerationResponse, error) {
	return call(s.f, ctx, "CreateVideoGeneration", r, &videov1.CreateVideoGenerationResponse{})
}

func (s *videoServer) GetVideoGeneration(ctx context.Context, r *videov1.GetVideoGenerationRequest) (*videov1.GetVideoGenerationResponse, error) {
	return call(s.f, ctx, "GetVideoGeneration", r, &videov1.GetVideoGenerationResponse{})
}

func (s *videoServer) DeleteVideoGeneration(ctx context.Context, r *videov1.DeleteVideoGenerationRequest) (*videov1.DeleteVideoGenerationResponse, error) {
	return call(s.f, ctx, "DeleteVideoGeneration", r, &videov1.DeleteVideoGenerationResponse{})
}
