package access

import (
	"errors"
	"testing"

	"github.com/taskmesh/taskmesh/platform/authn"
)

func TestMethod(t *testing.T) {
	user := authn.Principal{Kind: authn.KindUser, TenantID: "t"}
	agent := authn.Principal{Kind: authn.KindAgent, AgentID: "a"}
	admin := authn.Principal{Kind: authn.KindAdmin}
	tests := []struct {
		p      authn.Principal
		method string
		want   bool
	}{
		{p: user, method: "/taskmesh.task.v1.TaskService/GetTask", want: true},
		{p: user, method: "/taskmesh.task.v1.TaskService/WatchTask", want: true},
		{p: user, method: "/taskmesh.task.v1.LeaseService/ClaimTasks"},
		{p: agent, method: "/taskmesh.task.v1.LeaseService/ClaimTasks", want: true},
		{p: agent, method: "/taskmesh.task.v1.AttemptFilesService/RecordTaskCheckpoint", want: true},
		{p: user, method: "/taskmesh.task.v1.AttemptFilesService/GetTaskCheckpoint"},
		{p: user, method: "/taskmesh.task.v1.TaskService/SuspendTask", want: true},
		{p: user, method: "/taskmesh.managed.v1.ManagedServiceService/CreateService", want: true},
		{p: agent, method: "/taskmesh.managed.v1.ManagedServiceService/CreateService"},
		{p: agent, method: "/taskmesh.managed.v1.ServiceAgentService/SyncServices", want: true},
		{p: user, method: "/taskmesh.managed.v1.ServiceAgentService/SyncServices"},
		{p: agent, method: "/taskmesh.task.v1.TaskService/GetTask"},
		{p: user, method: "/taskmesh.video.v1.VideoService/CreateVideoGeneration", want: true},
		{p: agent, method: "/taskmesh.video.v1.VideoService/GetVideoGeneration"},
		{p: user, method: "/taskmesh.task.v1.TaskServiceX/GetTask"},
		// Tenants reach QuotaService; it refuses them operator actions.
		{p: user, method: "/taskmesh.quota.v1.QuotaService/CreateQuota", want: true},
		{p: agent, method: "/taskmesh.quota.v1.QuotaService/GetQuota"},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/ExplainTaskAdmission", want: true},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/ListClusterQueues", want: true},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/ResolveQueue"},
		{p: agent, method: "/taskmesh.quota.v1.AdmissionService/ListClusterQueues"},
		{p: admin, method: "/taskmesh.quota.v1.AdmissionService/PutClusterQueue", want: true},
		{p: admin, method: "/taskmesh.quota.v1.AdmissionService/ResolveQueue"},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/QueueWorkload"},
		{p: admin, method: "/taskmesh.quota.v1.AdmissionService/QueueWorkload"},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/FinishWorkload"},
		{p: admin, method: "/taskmesh.task.v1.TaskService/GetTask"},
		{p: admin, method: "/taskmesh.task.v1.LeaseService/ClaimTasks"},
		{p: admin, method: "/taskmesh.admin.v1.AdminService/CreateTenant", want: true},
		// The consumers service's APIs: tenants and operators (each sees
		// what the service scopes to them); agents never.
		{p: user, method: "/taskmesh.audit.v1.AuditService/ListAuditLogs", want: true},
		{p: admin, method: "/taskmesh.audit.v1.AuditService/ListAuditLogs", want: true},
		{p: agent, method: "/taskmesh.audit.v1.AuditService/ListAuditLogs"},
		{p: user, method: "/taskmesh.usage.v1.UsageService/GetUsage", want: true},
		{p: admin, method: "/taskmesh.usage.v1.UsageService/GetUsage", want: true},
		{p: user, method: "/taskmesh.webhook.v1.WebhookService/SetWebhookEndpoint", want: true},
		{p: agent, method: "/taskmesh.webhook.v1.WebhookService/ListWebhookDeliveries"},
		// Dead letters hold every tenant's events: operators only.
		{p: admin, method: "/taskmesh.deadletter.v1.DeadLetterService/ListDeadLetters", want: true},
		{p: user, method: "/taskmesh.deadletter.v1.DeadLetterService/ListDeadLetters"},
		{p: agent, method: "/taskmesh.deadletter.v1.DeadLetterService/DropDeadLetter"},
		{p: admin, method: "/taskmesh.quota.v1.QuotaService/CreateQuota", want: true},
		{p: admin, method: "/taskmesh.video.v1.VideoService/CreateVideoGeneration"},
		{p: user, method: "/taskmesh.pipeline.v1.PipelineService/CreateJob", want: true},
		{p: user, method: "/taskmesh.pipeline.v1.PipelineService/UploadJobInput", want: true},
		{p: agent, method: "/taskmesh.pipeline.v1.PipelineService/GetJob"},
		{p: admin, method: "/taskmesh.pipeline.v1.PipelineService/GetJob"},
		{p: user, method: "/taskmesh.admin.v1.AdminService/CreateTenant"},
		{p: agent, method: "/taskmesh.admin.v1.AdminService/ListTenants"},
		{p: authn.Principal{}, method: "/taskmesh.task.v1.TaskService/GetTask"},
		{p: user, method: "/taskmesh.task.v1.TaskGroupService/CreateTaskGroup", want: true},
		{p: user, method: "/taskmesh.task.v1.TaskGroupService/WatchTaskGroup", want: true},
		{p: user, method: "/taskmesh.task.v1.TemplateService/RunTemplate", want: true},
		{p: agent, method: "/taskmesh.task.v1.TemplateService/GetTemplate"},
		{p: agent, method: "/taskmesh.task.v1.TaskGroupService/GetTaskGroup"},
		{p: admin, method: "/taskmesh.task.v1.TaskGroupService/GetTaskGroup"},
		// Only an operator resets a repeat's breaker.
		{p: user, method: "/taskmesh.task.v1.TaskGroupService/ResetTaskGroupRepeat"},
		{p: agent, method: "/taskmesh.task.v1.TaskGroupService/ResetTaskGroupRepeat"},
		{p: admin, method: "/taskmesh.task.v1.TaskGroupService/ResetTaskGroupRepeat", want: true},
	}
	for _, tt := range tests {
		err := Method(tt.p, tt.method)
		if (err == nil) != tt.want || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("Method(%s, %s) = %v, want allowed=%v", tt.p.Kind, tt.method, err, tt.want)
		}
	}
}

func TestRoute(t *testing.T) {
	user := authn.Principal{Kind: authn.KindUser, TenantID: "t"}
	agent := authn.Principal{Kind: authn.KindAgent, AgentID: "a"}
	tests := []struct {
		p    authn.Principal
		path string
		want bool
	}{
		{p: user, path: "/api/v1/tasks", want: true},
		{p: user, path: "/api/v1/tasks/t1/cancel", want: true},
		{p: user, path: "/api/v1/agent/tasks/claim"},
		{p: agent, path: "/api/v1/agent/tasks/claim", want: true},
		{p: agent, path: "/api/v1/agent/heartbeat", want: true},
		{p: agent, path: "/api/v1/tasks"},
		{p: agent, path: "/api/v1/agentx"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/tasks"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/agent/tasks/claim"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/admin/tenants", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/admin", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/quotas", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/clusters/c1/inventory/A100", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/quotasx"},
		{p: user, path: "/api/v1/quotas", want: true},
		{p: user, path: "/api/v1/admin/tenants"},
		{p: user, path: "/api/v1/admin"},
		{p: agent, path: "/api/v1/admin/tenants/t/api-keys"},
		{p: user, path: "/api/v1/audit-logs", want: true},
		{p: user, path: "/api/v1/usage", want: true},
		{p: user, path: "/api/v1/webhook-endpoint", want: true},
		{p: user, path: "/api/v1/webhook-deliveries/msg_1/redeliver", want: true},
		{p: user, path: "/api/v1/admin/dead-letters"},
		{p: agent, path: "/api/v1/audit-logs"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/audit-logs", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/usage", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/webhook-deliveries/msg_1", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/webhook-endpoint"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/admin/dead-letters/scheduler/4/retry", want: true},
		{p: user, path: "/api/v1/task-groups", want: true},
		{p: user, path: "/api/v1/task-groups/g1/events", want: true},
		{p: user, path: "/api/v1/templates/t1/run", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/task-groups/g1"},
		{p: user, path: "/api/v1/task-groups/g1/repeat/reset"},
		{p: agent, path: "/api/v1/task-groups/g1/repeat/reset"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/task-groups/g1/repeat/reset", want: true},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/task-groups/g1/x/repeat/reset"},
		{p: user, path: "/api/v1/tasks/repeat/reset"},
		{p: agent, path: "/api/v1/tasks/repeat/reset"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/api/v1/tasks/repeat/reset", want: true},
		{p: user, path: "/jobs", want: true},
		{p: user, path: "/jobs/j1/events", want: true},
		{p: agent, path: "/jobs/uploads"},
		{p: authn.Principal{Kind: authn.KindAdmin}, path: "/jobs/j1"},
	}
	for _, tt := range tests {
		if err := Route(tt.p, tt.path); (err == nil) != tt.want {
			t.Errorf("Route(%s, %s) = %v, want allowed=%v", tt.p.Kind, tt.path, err, tt.want)
		}
	}
}
