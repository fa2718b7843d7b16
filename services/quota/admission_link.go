package quota

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
)

// GUQuotas is the service's submit-time GU quota check as the admission
// layer asks it (admission.Config.GUQuotas): its GU_QUOTA_NOT_EXISTS and
// GU_QUOTA_CREATING statuses pass through unchanged.
func (s *Service) GUQuotas() admission.GUQuotas { return guQuotas{s.app} }

type guQuotas struct{ app *app.App }

func (g guQuotas) CheckGUQuota(ctx context.Context, tenantID, quota string) (admission.WorkGroup, error) {
	wg, err := g.app.CheckGUQuota(ctx, tenantID, quota)
	if err != nil {
		return admission.WorkGroup{}, err
	}
	return admissionWorkGroup(wg), nil
}

func admissionWorkGroup(wg app.WorkGroup) admission.WorkGroup {
	return admission.WorkGroup{TenantID: wg.TenantID, Quota: wg.Quota, MachineType: wg.MachineType, GPUs: wg.GPUs,
		Status: wg.Status}
}

// resyncEvery bounds how long a WorkGroup queue that was closed while it
// still held admitted work outlives that work, should the admission
// layer's own removal of drained queues have failed.
const resyncEvery = 30 * time.Second

// SyncAdmission keeps adm's WorkGroup ClusterQueues in step with the
// WorkGroups — at once, whenever they may have changed (a WorkGroup
// running, or no longer: an unsubscription records WorkGroupDeleting in
// its own transaction), and every resyncEvery — until ctx ends. Both run
// in this process (WatchWorkGroups is in-process).
//
// The commands that stop WorkGroups running sync once more before they
// answer (app.App.FollowWorkGroups): once DeleteQuota has answered, its
// WorkGroups' queues admit nothing new.
func (s *Service) SyncAdmission(ctx context.Context, adm *admission.Service) {
	changed := s.app.WatchWorkGroups(ctx)
	s.app.FollowWorkGroups(func(ctx context.Context) error { return s.syncAdmission(ctx, adm) })
	defer s.app.FollowWorkGroups(nil)
	tick := time.NewTicker(resyncEvery)
	defer tick.Stop()
	for {
		if err := s.syncAdmission(ctx, adm); err != nil && ctx.Err() == nil {
			s.log.Warn("syncing WorkGroup queues with admission failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

func (s *Service) syncAdmission(ctx context.Context, adm *admission.Service) error {
	// One sync at a time: each reads the WorkGroups and writes what
	// follows from them.
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	groups, err := s.app.CurrentWorkGroups(ctx)
	if err != nil {
		return err
	}
	out := make([]admission.WorkGroup, len(groups))
	for i, g := range groups {
		out[i] = admissionWorkGroup(g)
	}
	return adm.SyncWorkGroups(ctx, out)
}
