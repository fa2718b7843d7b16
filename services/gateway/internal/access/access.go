// Package access decides which kind of caller may reach which internal
// service. The rule is the same for REST routes and gRPC methods: a tenant's
// API key calls the task API (taskmesh.task.v1.TaskService, REST
// /api/v1/… except /api/v1/agent/…) and the admission API
// (taskmesh.quota.v1.AdmissionService but its internal ResolveQueue), an
// agent token calls the lease API
// (taskmesh.task.v1.LeaseService, REST /api/v1/agent/…). Anything else is
// refused, so a leaked agent token cannot read tenants' tasks and a user key
// cannot impersonate an executor.
package access

import (
	"errors"
	"strings"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// ErrDenied is wrapped by every refusal (HTTP 403, gRPC PermissionDenied).
var ErrDenied = errors.New("permission denied")

// AgentRoutePrefix is the REST prefix of the lease API.
const AgentRoutePrefix = "/api/v1/agent/"

var (
	taskMethods  = "/" + taskv1.TaskService_ServiceDesc.ServiceName + "/"
	leaseMethods = "/" + taskv1.LeaseService_ServiceDesc.ServiceName + "/"
	// Tenants read queues and explain their tasks; ResolveQueue is the
	// scheduler's, and the service itself refuses tenants' writes.
	admissionMethods = "/" + quotav1.AdmissionService_ServiceDesc.ServiceName + "/"
	resolveQueue     = admissionMethods + "ResolveQueue"
)

// deniedError carries a message written for the caller.
type deniedError struct{ msg string }

func (e *deniedError) Error() string { return e.msg }
func (e *deniedError) Unwrap() error { return ErrDenied }

func denied(msg string) error { return &deniedError{msg: msg} }

// Method checks a gRPC full method name ("/pkg.Service/Method").
func Method(p authn.Principal, fullMethod string) error {
	switch {
	case p.Kind == authn.KindUser && strings.HasPrefix(fullMethod, taskMethods):
		return nil
	case p.Kind == authn.KindUser && strings.HasPrefix(fullMethod, admissionMethods) && fullMethod != resolveQueue:
		return nil
	case p.Kind == authn.KindAgent && strings.HasPrefix(fullMethod, leaseMethods):
		return nil
	case p.Kind == authn.KindUser && strings.HasPrefix(fullMethod, leaseMethods):
		return denied("API keys cannot call the agent API; use an agent token")
	case p.Kind == authn.KindAgent && strings.HasPrefix(fullMethod, taskMethods):
		return denied("agent tokens can only call the agent API")
	}
	return denied("method not available through the gateway")
}

// Route checks a REST path under /api/.
func Route(p authn.Principal, path string) error {
	agentRoute := strings.HasPrefix(path, AgentRoutePrefix)
	switch {
	case agentRoute && p.Kind == authn.KindAgent, !agentRoute && p.Kind == authn.KindUser:
		return nil
	case agentRoute:
		return denied("API keys cannot call agent routes; use an agent token")
	default:
		return denied("agent tokens can only call /api/v1/agent/ routes")
	}
}
