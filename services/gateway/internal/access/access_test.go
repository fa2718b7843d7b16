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
		{p: agent, method: "/taskmesh.task.v1.TaskService/GetTask"},
		{p: user, method: "/taskmesh.task.v1.TaskServiceX/GetTask"},
		{p: user, method: "/taskmesh.quota.v1.QuotaService/CreateQuota"},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/ExplainTaskAdmission", want: true},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/ListClusterQueues", want: true},
		{p: user, method: "/taskmesh.quota.v1.AdmissionService/ResolveQueue"},
		{p: agent, method: "/taskmesh.quota.v1.AdmissionService/ListClusterQueues"},
		{p: admin, method: "/taskmesh.task.v1.TaskService/GetTask"},
		{p: authn.Principal{}, method: "/taskmesh.task.v1.TaskService/GetTask"},
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
	}
	for _, tt := range tests {
		if err := Route(tt.p, tt.path); (err == nil) != tt.want {
			t.Errorf("Route(%s, %s) = %v, want allowed=%v", tt.p.Kind, tt.path, err, tt.want)
		}
	}
}
