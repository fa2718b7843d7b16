// Package access decides which kind of caller may reach which internal
// service. The rule is the same for REST routes and gRPC methods: a tenant's
// API key calls the task API (taskmesh.task.v1.TaskService, TaskGroupService
// but its ResetTaskGroupRepeat, TemplateService; REST /api/v1/… except
// /api/v1/agent/…), the video API
// (taskmesh.video.v1.VideoService, REST /v1/video/… and /api/v1/video/…),
// managed services (taskmesh.managed.v1.ManagedServiceService, REST
// /api/v1/services…)
// and the pipeline API (taskmesh.pipeline.v1.PipelineService, REST /jobs…),
// and reads its own quotas and queues (taskmesh.quota.v1.QuotaService,
// AdmissionService but its internal ResolveQueue), an agent token
// calls the lease API (taskmesh.task.v1.LeaseService and
// AttemptFilesService, taskmesh.managed.v1.ServiceAgentService, REST
// /api/v1/agent/…),
// an operator key calls the admin API (taskmesh.admin.v1.AdminService, REST
// /api/v1/admin/…), manages quotas and queues (QuotaService,
// AdmissionService, REST OperatorRoutes) and resets a repeat's circuit
// breaker (ResetTaskGroupRepeat, POST /api/v1/task-groups/{id}/repeat/reset),
// and nothing else. Anything else is refused, so a leaked agent token cannot
// read tenants' tasks and a user key cannot impersonate an executor. Which
// quota actions need an operator is the quota service's decision.
package access

import (
	"errors"
	"strings"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// ErrDenied is wrapped by every refusal (HTTP 403, gRPC PermissionDenied).
var ErrDenied = errors.New("permission denied")

// AgentRoutePrefix is the REST prefix of the lease API.
const AgentRoutePrefix = "/api/v1/agent/"

// AdminRoutePrefix is the REST prefix of the admin API.
const AdminRoutePrefix = "/api/v1/admin/"

var (
	taskMethods  = "/" + taskv1.TaskService_ServiceDesc.ServiceName + "/"
	groupMethods = "/" + taskv1.TaskGroupService_ServiceDesc.ServiceName + "/"
	// Closing a repeat's breaker is an operator's decision (manual
	// recovery by operations), audited with the operator's name.
	resetRepeat     = groupMethods + "ResetTaskGroupRepeat"
	templateMethods = "/" + taskv1.TemplateService_ServiceDesc.ServiceName + "/"
	leaseMethods    = "/" + taskv1.LeaseService_ServiceDesc.ServiceName + "/"
	// An attempt's checkpoint and artifacts are part of the agent protocol.
	attemptFilesMethods = "/" + taskv1.AttemptFilesService_ServiceDesc.ServiceName + "/"
	// Tenants declare managed services; agents synchronise them.
	managedMethods      = "/" + managedv1.ManagedServiceService_ServiceDesc.ServiceName + "/"
	serviceAgentMethods = "/" + managedv1.ServiceAgentService_ServiceDesc.ServiceName + "/"
	adminMethods        = "/" + adminv1.AdminService_ServiceDesc.ServiceName + "/"
	videoMethods        = "/" + videov1.VideoService_ServiceDesc.ServiceName + "/"
	// The pipeline API is a tenant's: its jobs and uploads belong to one.
	pipelineMethods = "/" + pipelinev1.PipelineService_ServiceDesc.ServiceName + "/"
	// A tenant's key reads its own quotas; the quota service refuses it
	// every operator action.
	quotaMethods = "/" + quotav1.QuotaService_ServiceDesc.ServiceName + "/"
	// Tenants read queues and explain their tasks; ResolveQueue is the
	// scheduler's, and the service itself refuses tenants' writes.
	admissionMethods = "/" + quotav1.AdmissionService_ServiceDesc.ServiceName + "/"
	resolveQueue     = admissionMethods + "ResolveQueue"
)

// OperatorRoutes are the REST prefixes, besides the admin API, that an
// operator key may call: the quota service's (quotas and admission queues).
var OperatorRoutes = []string{"/api/v1/quotas", "/api/v1/clusters", "/api/v1/tenants", "/api/v1/workgroups",
	"/api/v1/cluster-queues", "/api/v1/cohorts", "/api/v1/local-queues"}

func operatorRoute(path string) bool {
	for _, r := range OperatorRoutes {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// deniedError carries a message written for the caller.
type deniedError struct{ msg string }

func (e *deniedError) Error() string { return e.msg }
func (e *deniedError) Unwrap() error { return ErrDenied }

func denied(msg string) error { return &deniedError{msg: msg} }

// tenantMethod reports a method of the tenant-facing task APIs.
func tenantMethod(fullMethod string) bool {
	for _, prefix := range []string{taskMethods, groupMethods, templateMethods, videoMethods, pipelineMethods, managedMethods} {
		if strings.HasPrefix(fullMethod, prefix) {
			return true
		}
	}
	return false
}

// agentMethod reports a method of the agent protocol.
func agentMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, leaseMethods) || strings.HasPrefix(fullMethod, attemptFilesMethods) ||
		strings.HasPrefix(fullMethod, serviceAgentMethods)
}

// resetRoute reports POST /api/v1/task-groups/{id}/repeat/reset's path.
func resetRoute(path string) bool {
	id, ok := strings.CutPrefix(path, "/api/v1/task-groups/")
	if !ok {
		return false
	}
	id, ok = strings.CutSuffix(id, "/repeat/reset")
	return ok && id != "" && !strings.Contains(id, "/")
}

// Method checks a gRPC full method name ("/pkg.Service/Method").
func Method(p authn.Principal, fullMethod string) error {
	switch {
	case fullMethod == resetRepeat:
		if p.Kind == authn.KindAdmin {
			return nil
		}
		return denied("resetting a repeat's circuit breaker needs an operator key (tmo_…)")
	case strings.HasPrefix(fullMethod, adminMethods):
		if p.Kind == authn.KindAdmin {
			return nil
		}
		return denied("the admin API needs an operator key (tmo_…)")
	case fullMethod == resolveQueue:
		return denied("ResolveQueue is internal to the scheduler")
	case p.Kind == authn.KindAdmin && (strings.HasPrefix(fullMethod, quotaMethods) || strings.HasPrefix(fullMethod, admissionMethods)):
		return nil
	case p.Kind == authn.KindAdmin:
		return denied("operator keys can only call the admin and quota APIs")
	case p.Kind == authn.KindUser && tenantMethod(fullMethod):
		return nil
	case p.Kind == authn.KindUser && (strings.HasPrefix(fullMethod, quotaMethods) || strings.HasPrefix(fullMethod, admissionMethods)):
		return nil
	case p.Kind == authn.KindAgent && agentMethod(fullMethod):
		return nil
	case p.Kind == authn.KindUser && agentMethod(fullMethod):
		return denied("API keys cannot call the agent API; use an agent token")
	case p.Kind == authn.KindAgent && tenantMethod(fullMethod):
		return denied("agent tokens can only call the agent API")
	}
	return denied("method not available through the gateway")
}

// Route checks a REST path under /api/.
func Route(p authn.Principal, path string) error {
	agentRoute := strings.HasPrefix(path, AgentRoutePrefix)
	switch {
	case resetRoute(path):
		if p.Kind == authn.KindAdmin {
			return nil
		}
		return denied("resetting a repeat's circuit breaker needs an operator key (tmo_…)")
	case strings.HasPrefix(path, AdminRoutePrefix) || path == strings.TrimSuffix(AdminRoutePrefix, "/"):
		if p.Kind == authn.KindAdmin {
			return nil
		}
		return denied("the admin API needs an operator key (tmo_…)")
	case p.Kind == authn.KindAdmin && operatorRoute(path):
		return nil
	case p.Kind == authn.KindAdmin:
		return denied("operator keys can only call /api/v1/admin/, quota routes and repeat resets")
	case agentRoute && p.Kind == authn.KindAgent, !agentRoute && p.Kind == authn.KindUser:
		return nil
	case agentRoute:
		return denied("API keys cannot call agent routes; use an agent token")
	default:
		return denied("agent tokens can only call /api/v1/agent/ routes")
	}
}
