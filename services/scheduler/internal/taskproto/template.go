package taskproto

import (
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// TemplateToProto shows a template as the template API documents it (the
// TaskTemplate fields of docs/api/templates.md); the orchestration topic's template events
// carry the same message.
func TemplateToProto(t orch.Template) *taskv1.TaskTemplate {
	p := &taskv1.TaskTemplate{Id: t.ID, Name: t.Name, Description: t.Description, Command: t.Command, Args: t.Args,
		Workdir: t.Workdir, Env: t.Env, Timeout: int32(t.Timeout), Priority: int32(t.Priority), Category: t.Category,
		Tags: t.Tags, CreatedBy: t.CreatedBy, CreatedAt: ToTimestamp(t.CreatedAt), Artifacts: t.Artifacts}
	if t.Checkpoint {
		p.Checkpoint = &taskv1.CheckpointSpec{Enabled: true}
	}
	for _, v := range t.Variables {
		p.Variables = append(p.Variables, &taskv1.TemplateVar{Name: v.Name, Type: v.Type, Required: v.Required,
			Default: v.Default, Description: v.Description, Options: v.Options})
	}
	return p
}

// TemplateFromProto is TemplateToProto's inverse (the tenant and the
// bookkeeping fields are not in the message).
func TemplateFromProto(p *taskv1.TaskTemplate) orch.Template {
	t := orch.Template{ID: p.GetId(), Name: p.GetName(), Description: p.GetDescription(), Command: p.GetCommand(),
		Args: p.GetArgs(), Workdir: p.GetWorkdir(), Env: p.GetEnv(), Timeout: int(p.GetTimeout()),
		Priority: int(p.GetPriority()), Category: p.GetCategory(), Tags: p.GetTags(), CreatedBy: p.GetCreatedBy(),
		CreatedAt: FromTimestamp(p.GetCreatedAt()), Checkpoint: p.GetCheckpoint().GetEnabled(), Artifacts: p.GetArtifacts()}
	for _, v := range p.GetVariables() {
		t.Variables = append(t.Variables, orch.Var{Name: v.GetName(), Type: v.GetType(), Required: v.GetRequired(),
			Default: v.GetDefault(), Description: v.GetDescription(), Options: v.GetOptions()})
	}
	return t
}
