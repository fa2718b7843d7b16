// Package taskproto maps task values between the domain and their protobuf
// messages where more than one adapter or port shows the same value: the
// gRPC ports (requests and answers) and the event codec (the task topic)
// both carry a video task's parameters, and must agree on every field.
package taskproto

import (
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// VideoToProto maps a video task's parameters; nil stays nil.
func VideoToProto(v *domain.Video) *taskv1.VideoParams {
	if v == nil {
		return nil
	}
	return &taskv1.VideoParams{
		Model: v.Model, Type: v.Type, Prompt: v.Prompt, NegativePrompt: v.NegativePrompt, PromptExtend: v.PromptExtend,
		ActualPrompt: v.ActualPrompt, ImageUrl: v.ImageURL, ImageObjectKey: v.ImageObjectKey, Resolution: v.Resolution,
		Width: int32(v.Width), Height: int32(v.Height), Duration: int32(v.Duration), FrameNum: int32(v.FrameNum),
		Seed: int32(v.Seed), Watermark: v.Watermark,
	}
}

// VideoFromProto is VideoToProto's inverse; nil stays nil.
func VideoFromProto(p *taskv1.VideoParams) *domain.Video {
	if p == nil {
		return nil
	}
	return &domain.Video{
		Model: p.GetModel(), Type: p.GetType(), Prompt: p.GetPrompt(), NegativePrompt: p.GetNegativePrompt(),
		PromptExtend: p.GetPromptExtend(), ActualPrompt: p.GetActualPrompt(), ImageURL: p.GetImageUrl(),
		ImageObjectKey: p.GetImageObjectKey(), Resolution: p.GetResolution(), Width: int(p.GetWidth()),
		Height: int(p.GetHeight()), Duration: int(p.GetDuration()), FrameNum: int(p.GetFrameNum()), Seed: int(p.GetSeed()),
		Watermark: p.GetWatermark(),
	}
}
