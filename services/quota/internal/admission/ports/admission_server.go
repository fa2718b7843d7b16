package ports

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// AdmissionServer implements quotav1.AdmissionServiceServer.
type AdmissionServer struct {
	quotav1.UnimplementedAdmissionServiceServer
	App *app.App
	Log *slog.Logger
}

// caller reads the principal of the call: admins are operators.
func caller(ctx context.Context) (app.Caller, error) {
	p, err := authn.Require(ctx)
	if err != nil {
		return app.Caller{}, err
	}
	return app.Caller{TenantID: p.TenantID, Tier: p.Tier, Operator: p.Kind == authn.KindAdmin, Actor: p.Subject, IP: p.RemoteIP}, nil
}

// ResolveQueue implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) ResolveQueue(ctx context.Context, req *quotav1.ResolveQueueRequest) (*quotav1.ResolveQueueResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	cq, err := s.App.ResolveQueue(ctx, c, req.GetQueue(), req.GetQuota(), req.GetResources())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.ResolveQueueResponse{ClusterQueue: cq}, nil
}

// QueueWorkload implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) QueueWorkload(ctx context.Context, req *quotav1.QueueWorkloadRequest) (*quotav1.QueueWorkloadResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	f := app.QueueFact(req.GetTaskId(), req.GetTaskVersion(), req.GetTenantId(), req.GetClusterQueue(), req.GetPriority(),
		req.GetCreatedAt().AsTime(), req.GetResources())
	res, err := s.App.QueueWorkload(ctx, c, f)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.QueueWorkloadResponse{Admitted: res.Admitted, ClusterQueue: res.ClusterQueue, Flavors: res.Flavors,
		TaskVersion: res.TaskVersion}, nil
}

// FinishWorkload implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) FinishWorkload(ctx context.Context, req *quotav1.FinishWorkloadRequest) (*quotav1.FinishWorkloadResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	admitted, err := s.App.FinishWorkload(ctx, c, app.FinishFact(req.GetTaskId(), req.GetTaskVersion(), req.GetTenantId(), req.GetReason()))
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := &quotav1.FinishWorkloadResponse{Admitted: make([]*quotav1.WorkloadAdmission, len(admitted))}
	for i, a := range admitted {
		out.Admitted[i] = &quotav1.WorkloadAdmission{TaskId: a.TaskID, ClusterQueue: a.ClusterQueue, Flavors: a.Flavors,
			TaskVersion: a.TaskVersion}
	}
	return out, nil
}

func (s *AdmissionServer) clusterQueues(ds []app.Definition) []*quotav1.ClusterQueue {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	u, live := s.App.Usage(names, nil)
	out := make([]*quotav1.ClusterQueue, len(ds))
	for i, d := range ds {
		q := &quotav1.ClusterQueue{Name: d.Name, Spec: d.ClusterQueue, Origin: d.Origin, Closing: d.Closing}
		if live {
			q.PendingWorkloads, q.AdmittedWorkloads = int32(u.Pending[d.Name]), int32(u.Admitted[d.Name])
			q.FlavorsUsage = u.Queues[d.Name]
		}
		out[i] = q
	}
	return out
}

// ListClusterQueues implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) ListClusterQueues(ctx context.Context, _ *quotav1.ListClusterQueuesRequest) (*quotav1.ListClusterQueuesResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ds, err := s.App.List(ctx, c, app.KindClusterQueue)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.ListClusterQueuesResponse{ClusterQueues: s.clusterQueues(ds)}, nil
}

// GetClusterQueue implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) GetClusterQueue(ctx context.Context, req *quotav1.GetClusterQueueRequest) (*quotav1.GetClusterQueueResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	d, err := s.App.Get(ctx, c, app.KindClusterQueue, req.GetName())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.GetClusterQueueResponse{ClusterQueue: s.clusterQueues([]app.Definition{d})[0]}, nil
}

// PutClusterQueue implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) PutClusterQueue(ctx context.Context, req *quotav1.PutClusterQueueRequest) (*quotav1.PutClusterQueueResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	d, err := s.App.Put(ctx, c, app.Definition{Kind: app.KindClusterQueue, Name: req.GetName(), ClusterQueue: req.GetSpec()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.PutClusterQueueResponse{ClusterQueue: s.clusterQueues([]app.Definition{d})[0]}, nil
}

// DeleteClusterQueue implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) DeleteClusterQueue(ctx context.Context, req *quotav1.DeleteClusterQueueRequest) (*quotav1.DeleteClusterQueueResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.App.Delete(ctx, c, app.KindClusterQueue, req.GetName()); err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.DeleteClusterQueueResponse{}, nil
}

// cohorts answers the cohorts ds, each naming the ClusterQueues in it the
// caller may see.
func (s *AdmissionServer) cohorts(ctx context.Context, c app.Caller, ds []app.Definition) ([]*quotav1.Cohort, error) {
	queues, err := s.App.List(ctx, c, app.KindClusterQueue)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	u, live := s.App.Usage(nil, names)
	out := make([]*quotav1.Cohort, len(ds))
	for i, d := range ds {
		ch := &quotav1.Cohort{Name: d.Name, Spec: d.Cohort}
		for _, q := range queues {
			if q.ClusterQueue.GetCohort() == d.Name {
				ch.ClusterQueues = append(ch.ClusterQueues, q.Name)
			}
		}
		for _, other := range ds {
			if other.Cohort.GetParent() == d.Name {
				ch.ChildCohorts = append(ch.ChildCohorts, other.Name)
			}
		}
		if live {
			ch.FlavorsUsage = u.Cohorts[d.Name]
		}
		out[i] = ch
	}
	return out, nil
}

// ListCohorts implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) ListCohorts(ctx context.Context, _ *quotav1.ListCohortsRequest) (*quotav1.ListCohortsResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ds, err := s.App.List(ctx, c, app.KindCohort)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	cs, err := s.cohorts(ctx, c, ds)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.ListCohortsResponse{Cohorts: cs}, nil
}

// PutCohort implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) PutCohort(ctx context.Context, req *quotav1.PutCohortRequest) (*quotav1.PutCohortResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	d, err := s.App.Put(ctx, c, app.Definition{Kind: app.KindCohort, Name: req.GetName(), Cohort: req.GetSpec()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	all, err := s.App.List(ctx, c, app.KindCohort)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	cs, err := s.cohorts(ctx, c, all)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	for _, ch := range cs {
		if ch.Name == d.Name {
			return &quotav1.PutCohortResponse{Cohort: ch}, nil
		}
	}
	return &quotav1.PutCohortResponse{Cohort: &quotav1.Cohort{Name: d.Name, Spec: d.Cohort}}, nil
}

// DeleteCohort implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) DeleteCohort(ctx context.Context, req *quotav1.DeleteCohortRequest) (*quotav1.DeleteCohortResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.App.Delete(ctx, c, app.KindCohort, req.GetName()); err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.DeleteCohortResponse{}, nil
}

// ListLocalQueues implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) ListLocalQueues(ctx context.Context, _ *quotav1.ListLocalQueuesRequest) (*quotav1.ListLocalQueuesResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ds, err := s.App.List(ctx, c, app.KindLocalQueue)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := make([]*quotav1.LocalQueue, len(ds))
	for i, d := range ds {
		out[i] = &quotav1.LocalQueue{Name: d.Name, Spec: d.LocalQueue}
	}
	return &quotav1.ListLocalQueuesResponse{LocalQueues: out}, nil
}

// PutLocalQueue implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) PutLocalQueue(ctx context.Context, req *quotav1.PutLocalQueueRequest) (*quotav1.PutLocalQueueResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	d, err := s.App.Put(ctx, c, app.Definition{Kind: app.KindLocalQueue, Name: req.GetName(), LocalQueue: req.GetSpec()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.PutLocalQueueResponse{LocalQueue: &quotav1.LocalQueue{Name: d.Name, Spec: d.LocalQueue}}, nil
}

// DeleteLocalQueue implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) DeleteLocalQueue(ctx context.Context, req *quotav1.DeleteLocalQueueRequest) (*quotav1.DeleteLocalQueueResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.App.Delete(ctx, c, app.KindLocalQueue, req.GetName()); err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &quotav1.DeleteLocalQueueResponse{}, nil
}

// ExplainTaskAdmission implements quotav1.AdmissionServiceServer.
func (s *AdmissionServer) ExplainTaskAdmission(ctx context.Context, req *quotav1.ExplainTaskAdmissionRequest) (*quotav1.ExplainTaskAdmissionResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ta, err := s.App.ExplainTask(ctx, c, req.GetTaskId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := &quotav1.ExplainTaskAdmissionResponse{TaskId: ta.TaskID, ClusterQueue: ta.ClusterQueue, State: ta.State,
		Reason: ta.Reason, Shortages: ta.Shortages, BlockedBy: ta.BlockedBy, WaitingFor: ta.WaitingFor, Flavors: ta.Flavors}
	if ta.State == app.StatePending {
		out.Position = int32(ta.Position)
	}
	if ta.AdmittedAtUnixNano != 0 {
		out.AdmittedAt = timestamppb.New(time.Unix(0, ta.AdmittedAtUnixNano))
	}
	return out, nil
}
