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

// SpecToProto maps a normalized spec to the TaskSpec that states it: the
// task topic's submissions and updates, a group's member definitions, and
// the task a repeat runs as a group shows it (docs/api/task-groups.md).
func SpecToProto(s domain.Spec) *taskv1.TaskSpec {
	p := &taskv1.TaskSpec{
		Name: s.Name, Type: s.Type, Command: s.Command, Args: s.Args, Workdir: s.Workdir, Env: s.Env,
		Timeout: i32(s.Timeout), Priority: i32(s.Priority), RetryDelay: i32(s.RetryDelay), MaxRetries: i32(s.MaxRetries),
		MachineId: s.MachineID, GroupId: s.GroupID, ParentId: s.ParentID, DependsOn: s.DependsOn,
		LeaseTtlSec: i32(s.LeaseTTL), RenewIntervalSec: i32(s.RenewInterval), HeartbeatIntervalSec: i32(s.HeartbeatInterval),
		GracePeriodSec: i32(s.GracePeriod), Queue: s.Queue,
		Distribution: &taskv1.Distribution{Mode: s.Mode, Labels: s.Labels, Count: int32(s.ScatterCount)},
		Resources:    s.Resources, Quota: s.Quota, Video: VideoToProto(s.Video),
		Artifacts: s.Artifacts,
	}
	if s.Checkpoint {
		p.Checkpoint = &taskv1.CheckpointSpec{Enabled: true}
	}
	if s.Webhook != "" {
		p.Webhook = &taskv1.Webhook{Url: s.Webhook}
	}
	if s.TargetIP != "" {
		p.Targets = &taskv1.Targets{Ips: []string{s.TargetIP}}
	}
	return p
}

func i32(v int) *int32 {
	x := int32(v)
	return &x
}
