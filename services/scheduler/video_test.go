package scheduler_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

func TestNewRefusesABadVideoConfig(t *testing.T) {
	pool, err := pg.Open(context.Background(), pg.Config{URL: pgtest.New(t).URL, Schema: scheduler.Schema, MaxConns: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tests := map[string]scheduler.VideoConfig{
		"no models":          {Models: []scheduler.VideoModel{}},
		"unknown type":       {Models: []scheduler.VideoModel{{ID: "m", Type: "text_to_image"}}},
		"default tier":       {DefaultTier: "gold"},
		"route priority":     {Routes: map[string]scheduler.VideoRoute{"standard": {Queue: "q", Priority: 0}}},
		"rewriter, no model": {RewriterBaseURL: "http://llm/v1"},
	}
	for name, vc := range tests {
		if _, err := scheduler.New(scheduler.Config{DB: pool, Video: &vc}); err == nil || !strings.Contains(err.Error(), "video") && !strings.Contains(err.Error(), "rewrite") {
			t.Errorf("%s: New = %v", name, err)
		}
	}
	if s := (scheduler.VideoConfig{RewriterAPIKey: "sk-secret"}).String(); strings.Contains(s, "sk-secret") {
		t.Errorf("the config prints its key: %s", s)
	}
}

func TestVideoServiceOverGRPC(t *testing.T) {
	e := newEnv(t, func(c *scheduler.Config) { c.Video = &scheduler.VideoConfig{} })
	client := videov1.NewVideoServiceClient(e.conn)
	ctx := metadata.AppendToOutgoingContext(user("acme"), "x-request-id", "req-1")
	created, err := client.CreateVideoGeneration(ctx, &videov1.CreateVideoGenerationRequest{Model: "wan2.2-t2v",
		Input: &videov1.VideoGenerationInput{Prompt: "a cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetRequestId() != "req-1" || created.GetOutput().GetTaskStatus() != "QUEUED" {
		t.Errorf("created = %v", created)
	}
	got, err := client.GetVideoGeneration(ctx, &videov1.GetVideoGenerationRequest{TaskId: created.GetOutput().GetTaskId()})
	if err != nil || got.GetData().GetTaskStatus() != "QUEUED" || got.GetData().GetTaskInput().GetPrompt() != "a cat" || got.GetRequestIdCamel() != "req-1" {
		t.Errorf("get = %v, %v", got, err)
	}
	// The standard route applies to a tenant without a tier.
	task, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: created.GetOutput().GetTaskId()})
	if err != nil || task.GetTask().GetPriority() != 5 || task.GetTask().GetQueue() != "tenant-low-priority-queue" {
		t.Errorf("task = %v, %v", task, err)
	}
	if _, err := client.GetVideoGeneration(user("other"), &videov1.GetVideoGenerationRequest{TaskId: created.GetOutput().GetTaskId()}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another tenant: %v", err)
	}
	// A gRPC call has no path: the refusal of a missing id says what the
	// field is on both transports.
	_, err = client.GetVideoGeneration(ctx, &videov1.GetVideoGenerationRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "task_id: is required (over REST it is the last path segment)" {
		t.Errorf("no task id: %v", err)
	}
}
