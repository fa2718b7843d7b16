package ports

import (
	"context"
	"log/slog"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// AttemptFilesServer serves taskv1.AttemptFilesService: the checkpoints and
// artifacts of an attempt (agents only).
type AttemptFilesServer struct {
	taskv1.UnimplementedAttemptFilesServiceServer
	App *app.App
	Log *slog.Logger
}

func (s *AttemptFilesServer) CreateCheckpointUpload(ctx context.Context, r *taskv1.CreateCheckpointUploadRequest) (*taskv1.CreateCheckpointUploadResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	up, err := s.App.CreateCheckpointUpload(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId(), r.GetSizeBytes(), r.GetSha256())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.CreateCheckpointUploadResponse{UploadUrl: up.URL, Headers: up.Headers, ObjectKey: up.Key,
		ExpiresAt: timestamppb.New(up.ExpiresAt)}, nil
}

func (s *AttemptFilesServer) RecordTaskCheckpoint(ctx context.Context, r *taskv1.RecordTaskCheckpointRequest) (*taskv1.RecordTaskCheckpointResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	_, err = s.App.RecordTaskCheckpoint(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId(),
		app.ResultObject{Key: r.GetObjectKey(), Size: r.GetSizeBytes(), SHA256: r.GetSha256()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.RecordTaskCheckpointResponse{}, nil
}

func (s *AttemptFilesServer) GetTaskCheckpoint(ctx context.Context, r *taskv1.GetTaskCheckpointRequest) (*taskv1.GetTaskCheckpointResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	link, err := s.App.GetTaskCheckpoint(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := &taskv1.GetTaskCheckpointResponse{}
	if cp := link.Checkpoint; cp != nil {
		out.ObjectKey, out.DownloadUrl, out.SizeBytes, out.Sha256 = cp.Key, link.URL, cp.SizeBytes, cp.SHA256
	}
	return out, nil
}

func (s *AttemptFilesServer) CreateArtifactUpload(ctx context.Context, r *taskv1.CreateArtifactUploadRequest) (*taskv1.CreateArtifactUploadResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	up, err := s.App.CreateArtifactUpload(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId(), r.GetPath(), r.GetSizeBytes(), r.GetSha256())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.CreateArtifactUploadResponse{UploadUrl: up.URL, Headers: up.Headers, ObjectKey: up.Key,
		ExpiresAt: timestamppb.New(up.ExpiresAt)}, nil
}
