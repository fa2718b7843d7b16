package agent

import (
	"context"
	"path/filepath"
	"time"

	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/services"
)

// servicesLoop keeps the managed services the server declares for this
// agent (docs/api/services.md): at every heartbeat interval it reports
// what the supervisor runs and reconciles to the answer. While the server
// is unreachable the services keep their last desired state. When the
// loop ends (the agent stops) the services are stopped.
func (a *Agent) servicesLoop(ctx context.Context) {
	sup := services.New(services.Config{Dir: filepath.Join(a.cfg.DataDir, "services"), BaseEnv: a.baseEnv,
		Logger: a.log.With("part", "services")})
	defer sup.Close()
	client := managedv1.NewServiceAgentServiceClient(a.conn)
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		a.syncServices(ctx, client, sup)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Agent) syncServices(ctx context.Context, client managedv1.ServiceAgentServiceClient, sup *services.Supervisor) {
	req := &managedv1.SyncServicesRequest{AgentId: a.cfg.AgentID, Labels: a.cfg.Labels}
	for _, st := range sup.Statuses() {
		req.Reports = append(req.Reports, &managedv1.ServiceReport{ServiceId: st.ID, Version: st.Version,
			CurrentState: st.State, Pid: int32(st.PID), Restarts: int32(st.Restarts), Error: truncateUTF8(st.Error, 1024)})
	}
	cctx, cancel := a.rpcCtx(ctx)
	resp, err := client.SyncServices(cctx, req)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			a.log.Debug("service sync failed", "err", err)
		}
		return
	}
	desired := make([]services.Desired, 0, len(resp.GetServices()))
	for _, s := range resp.GetServices() {
		desired = append(desired, services.Desired{ID: s.GetServiceId(), Version: s.GetVersion(), Command: s.GetCommand(),
			Args: s.GetArgs(), Env: s.GetEnv(), RestartPolicy: s.GetRestartPolicy(), Running: s.GetDesiredState() == "running",
			Grace: time.Duration(s.GetGracePeriodSec()) * time.Second})
	}
	sup.Reconcile(desired)
}
