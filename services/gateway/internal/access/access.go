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
// AdmissionService but its internal ResolveQueue, QueueWorkload and
// FinishWorkload), an agent token
// calls the lease API (taskmesh.task.v1.LeaseService and
// AttemptFilesService, taskmesh.managed.v1.ServiceAgentService, REST
// /api/v1/agent/…),
// an operator key calls the admin API (every service of taskmesh.admin.v1,
// REST /api/v1/admin/…), the dead letters (taskmesh.deadletter.v1, REST
// under /api/v1/admin/), manages quotas and queues (QuotaService,
// AdmissionService, REST OperatorRoutes) and resets a repeat's circuit
// breaker (ResetTaskGroupRepeat, POST /api/v1/task-groups/{id}/repeat/reset
// and POST /api/v1/tasks/repeat/reset),
// and nothing else. Both a tenant's key and an operator key read the
// consumers service's APIs — the audit log, usage and webhook deliveries
// (taskmesh.audit.v1, usage.v1, webhook.v1), which scope what each sees.
// Every authenticated caller may use gRPC server reflection. Anything else
// is refused, so a leaked agent token cannot read tenants' tasks and a user
// key cannot impersonate an executor. Which quota actions need an operator
// is the quota service's decision.
package access

import (
	"errors"
	"strings"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// ConsumerMethods are the method prefixes of the consumers service's APIs,
// which the gateway forwards to it.
var ConsumerMethods = []string{
	"/" + auditv1.AuditService_ServiceDesc.ServiceName + "/",
	"/" + usagev1.UsageService_ServiceDesc.ServiceName + "/",
	"/" + webhookv1.WebhookService_ServiceDesc.ServiceName + "/",
}

// IsConsumerMethod reports whether a full method belongs to the consumers
// service.
func IsConsumerMethod(fullMethod string) bool {
	for _, p := range ConsumerMethods {
		if strings.HasPrefix(fullMethod, p) {
			return true
		}
	}
	return false
}

// deadLetterMethods are the dead-letter API's, operators only.
var deadLetterMethods = "/" + deadletterv1.DeadLetterService_ServiceDesc.ServiceName + "/"

// ErrDenied is wrapped by every refusal (HTTP 403, gRPC PermissionDenied).
var ErrDenied = errors.New("permission denied")

// AgentRoutePrefix is the REST prefix of the lease API.
const AgentRoutePrefix = "/api/v1/agent/"

// HeartbeatRoute and HeartbeatMethod are the agent's machine heartbeat,
// the one call through which an agent token's address may change.
var (
	HeartbeatRoute  = AgentRoutePrefix + "heartbeat"
	HeartbeatMethod = "/" + taskv1.LeaseService_ServiceDesc.ServiceName + "/SendHeartbeat"
)

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
	// Every service of the admin package (tenants and keys, the agent
	// fleet) is the operators'.
	adminMethods = "/" + string(adminv1.File_taskmesh_admin_v1_admin_service_proto.Package()) + "."
	videoMethods = "/" + videov1.VideoService_ServiceDesc.ServiceName + "/"
	// The pipeline API is a tenant's: its jobs and uploads belong to one.
	pipelineMethods = "/" + pipelinev1.PipelineService_ServiceDesc.ServiceName + "/"
	// A tenant's key reads its own quotas; the quota service refuses it
	// every operator action.
	quotaMethods = "/" + quotav1.QuotaService_ServiceDesc.ServiceName + "/"
	// Tenants read queues and explain their tasks; ResolveQueue,
	// QueueWorkload and FinishWorkload are the scheduler's, and the service
	// itself refuses tenants' writes.
	admissionMethods = "/" + quotav1.AdmissionService_ServiceDesc.ServiceName + "/"
	resolveQueue     = admissionMethods + "ResolveQueue"
	queueWorkload    = admissionMethods + "QueueWorkload"
	finishWorkload   = admissionMethods + "FinishWorkload"
)

// OperatorRoutes are the REST prefixes, besides the admin API, that an
// operator key may call: the quota service's (quotas and admission queues).
var OperatorRoutes = []string{"/api/v1/quotas", "/api/v1/clusters", "/api/v1/tenants", "/api/v1/workgroups",
	"/api/v1/cluster-queues", "/api/v1/cohorts", "/api/v1/local-queues",
	"/api/v1/audit-logs", "/api/v1/usage", "/api/v1/webhook-deliveries"}

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

// fleetMethods are the scheduler's internal fleet API, which only the
// gateway's own agent admin service calls; the front door never forwards
// them (Method refuses them to everyone).
var fleetMethods = "/" + taskv1.AgentFleetService_ServiceDesc.ServiceName + "/"

// OwnMethod checks a call the gateway makes itself, for a service it
// serves (not a client's call it forwards): what Method allows, and an
// operator's calls of the scheduler's fleet API.
func OwnMethod(p authn.Principal, fullMethod string) error {
	if p.Kind == authn.KindAdmin && strings.HasPrefix(fullMethod, fleetMethods) {
		return nil
	}
	return Method(p, fullMethod)
}

// reflectionMethods prefixes gRPC server reflection (v1 and v1alpha),
// which any authenticated caller may use: it describes the public
// contracts, nothing of anyone's data.
const reflectionMethods = "/grpc.reflection."

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

// resetRoute reports the paths of a repeat's reset:
// /api/v1/task-groups/{id}/repeat/reset and /api/v1/tasks/repeat/reset.
func resetRoute(path string) bool {
	if path == "/api/v1/tasks/repeat/reset" {
		return true
	}
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
	case strings.HasPrefix(fullMethod, reflectionMethods):
		return nil
	case fullMethod == resetRepeat:
		if p.Kind == authn.KindAdmin {
			return nil
		}
		return denied("resetting a repeat's circuit breaker needs an operator key (tmo_…)")
	case strings.HasPrefix(fullMethod, adminMethods) || strings.HasPrefix(fullMethod, deadLetterMethods):
		if p.Kind == authn.KindAdmin {
			return nil
		}
		return denied("the admin API needs an operator key (tmo_…)")
	case IsConsumerMethod(fullMethod) && (p.Kind == authn.KindAdmin || p.Kind == authn.KindUser):
		return nil
	case fullMethod == resolveQueue, fullMethod == queueWorkload, fullMethod == finishWorkload:
		return denied(fullMethod[len(admissionMethods):] + " is internal to the scheduler")
	case p.Kind == authn.KindAdmin && (strings.HasPrefix(fullMethod, quotaMethods) || strings.HasPrefix(fullMethod, admissionMethods)):
		return nil
	case p.Kind == authn.KindAdmin:
		return denied("operator keys can only call the admin, quota, audit, usage and webhook delivery APIs and repeat resets")
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
		return denied("operator keys can only call /api/v1/admin/, quota, audit, usage and webhook delivery routes and repeat resets")
	case agentRoute && p.Kind == authn.KindAgent, !agentRoute && p.Kind == authn.KindUser:
		return nil
	case agentRoute:
		return denied("API keys cannot call agent routes; use an agent token")
	default:
		return denied("agent tokens can only call /api/v1/agent/ routes")
	}
}
