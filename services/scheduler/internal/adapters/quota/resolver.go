package quota

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Resolver is app.Admission over the quota service's AdmissionService.
type Resolver struct {
	client        quotav1.AdmissionServiceClient
	internalToken string
}

// NewResolver calls the quota service on conn, authenticating as an
// internal service with internalToken on behalf of each caller.
func NewResolver(conn grpc.ClientConnInterface, internalToken string) *Resolver {
	return &Resolver{client: quotav1.NewAdmissionServiceClient(conn), internalToken: internalToken}
}

// ResolveQueue implements app.Admission. The caller's principal travels with
// the call so the quota service decides which queues its tenant and tier may
// use. An invalid request (an unknown queue) is a *domain.InvalidError
// naming the field the quota service resolved by — queue, else quota,
// else resources (which route GPU work to the tier's default queue) — so
// that the caller can place it (a group member's tasks[<i>].queue). Its
// other answers (the GU check's GU_QUOTA_NOT_EXISTS / GU_QUOTA_CREATING,
// docs/api/quota.md#the-submit-time-gu-check; a queue the tenant may not
// use) are returned as they are; an unreachable quota service is
// Unavailable.
func (r *Resolver) ResolveQueue(ctx context.Context, c app.Caller, queue, quota string, resources map[string]string) (string, error) {
	p := authn.Principal{Kind: authn.KindUser, TenantID: c.Tenant, Subject: c.Subject, RemoteIP: c.IP, Tier: c.Tier}
	if c.Tenant == "*" {
		p = authn.Principal{Kind: authn.KindAdmin, Subject: c.Subject, RemoteIP: c.IP}
	}
	res, err := r.client.ResolveQueue(authn.Outgoing(ctx, p, r.internalToken),
		&quotav1.ResolveQueueRequest{Queue: queue, Quota: quota, Resources: resources})
	if err != nil {
		st, ok := status.FromError(err)
		switch {
		case ok && st.Code() == codes.Unavailable:
			return "", status.Error(codes.Unavailable, "quota service unavailable: the task was not created; try again")
		case ok && st.Code() == codes.InvalidArgument:
			field := "resources"
			if queue != "" {
				field = "queue"
			} else if quota != "" {
				field = "quota"
			}
			return "", &domain.InvalidError{Field: field, Reason: st.Message()}
		}
		return "", err
	}
	return res.GetClusterQueue(), nil
}

// QueueWorkload implements app.Admission: the task's stay as its
// TaskSubmitted tells the quota service (cluster queue, priority, creation
// time, resource requests), asked as the scheduler itself.
func (r *Resolver) QueueWorkload(ctx context.Context, t domain.Task) (app.AdmissionDecision, bool, error) {
	p := authn.Principal{Kind: authn.KindAdmin, Subject: "scheduler"}
	res, err := r.client.QueueWorkload(authn.Outgoing(ctx, p, r.internalToken), &quotav1.QueueWorkloadRequest{
		TaskId: t.ID, TaskVersion: t.AdmissionEpoch, TenantId: t.TenantID, ClusterQueue: t.ClusterQueue,
		Priority: int32(t.Spec.Priority), CreatedAt: timestamppb.New(t.CreatedAt), Resources: t.Spec.Resources})
	if err != nil || !res.GetAdmitted() {
		return app.AdmissionDecision{}, false, err
	}
	return app.AdmissionDecision{TaskID: t.ID, Epoch: res.GetTaskVersion(), ClusterQueue: res.GetClusterQueue(), Flavors: res.GetFlavors()}, true, nil
}

// finishReasons are the reasons a finished workload records, by the
// task's final status (as the quota service's projection names them).
var finishReasons = map[domain.Status]string{domain.StatusCompleted: "succeeded", domain.StatusFailed: "failed",
	domain.StatusCancelled: "canceled"}

// FinishWorkload implements app.Admission.
func (r *Resolver) FinishWorkload(ctx context.Context, t domain.Task) ([]app.AdmissionDecision, error) {
	reason, ok := finishReasons[t.Status]
	if !ok {
		return nil, nil
	}
	p := authn.Principal{Kind: authn.KindAdmin, Subject: "scheduler"}
	res, err := r.client.FinishWorkload(authn.Outgoing(ctx, p, r.internalToken), &quotav1.FinishWorkloadRequest{
		TaskId: t.ID, TaskVersion: t.Version, TenantId: t.TenantID, Reason: reason})
	if err != nil {
		return nil, err
	}
	out := make([]app.AdmissionDecision, len(res.GetAdmitted()))
	for i, a := range res.GetAdmitted() {
		out[i] = app.AdmissionDecision{TaskID: a.GetTaskId(), Epoch: a.GetTaskVersion(), ClusterQueue: a.GetClusterQueue(),
			Flavors: a.GetFlavors()}
	}
	return out, nil
}
