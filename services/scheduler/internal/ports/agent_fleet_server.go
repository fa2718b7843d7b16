package ports

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	mapp "github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
)

// AgentFleetServer serves taskv1.AgentFleetService, the fleet as the
// gateway's admin API shows it to operators.
type AgentFleetServer struct {
	taskv1.UnimplementedAgentFleetServiceServer
	App *app.App
	// Services, when set, fills each agent's managed services.
	Services *mapp.App
	Log      *slog.Logger
}

// operator is the caller of the fleet API: operators only.
func operator(ctx context.Context) (app.Caller, error) {
	p, err := authn.Require(ctx)
	if err != nil {
		return app.Caller{}, err
	}
	if p.Kind != authn.KindAdmin {
		return app.Caller{}, status.Errorf(codes.PermissionDenied, "the agent fleet is for operators, not a %s credential", p.Kind)
	}
	return app.Caller{Tenant: "*", Subject: p.Subject, IP: p.RemoteIP}, nil
}

func (s *AgentFleetServer) ListFleetAgents(ctx context.Context, r *taskv1.ListFleetAgentsRequest) (*taskv1.ListFleetAgentsResponse, error) {
	c, err := operator(ctx)
	if err != nil {
		return nil, err
	}
	agents, err := s.App.ListFleet(ctx, c, r.GetAgentIds())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	resp := &taskv1.ListFleetAgentsResponse{Agents: make([]*taskv1.FleetAgent, 0, len(agents))}
	for _, a := range agents {
		resp.Agents = append(resp.Agents, fleetAgentToProto(a))
	}
	return resp, s.withServices(ctx, c, resp.Agents)
}

// withServices fills the agents' managed services, read for all of them
// at once.
func (s *AgentFleetServer) withServices(ctx context.Context, c app.Caller, agents []*taskv1.FleetAgent) error {
	if s.Services == nil || len(agents) == 0 {
		return nil
	}
	ids := make([]string, len(agents))
	for i, a := range agents {
		ids[i] = a.GetAgentId()
	}
	on, err := s.Services.OnAgents(ctx, mapp.Caller{Tenant: c.Tenant, Subject: c.Subject}, ids)
	if err != nil {
		return toStatus(s.Log, err)
	}
	for _, a := range agents {
		for _, as := range on[a.GetAgentId()] {
			sv, in := as.Service, as.Instance
			a.Services = append(a.Services, &taskv1.FleetAgentService{ServiceId: sv.ID, TenantId: sv.TenantID,
				Name: sv.Spec.Name, Version: sv.Spec.Version, DesiredState: sv.Spec.DesiredState,
				CurrentState: in.State, Pid: int32(in.PID), Restarts: int32(in.Restarts), LastHeartbeat: ts(in.At)})
		}
	}
	return nil
}

func (s *AgentFleetServer) SetAgentDrain(ctx context.Context, r *taskv1.SetAgentDrainRequest) (*taskv1.SetAgentDrainResponse, error) {
	c, err := operator(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.App.SetDrain(ctx, c, r.GetAgentId(), r.GetDrained())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	resp := &taskv1.SetAgentDrainResponse{Agent: fleetAgentToProto(a)}
	return resp, s.withServices(ctx, c, []*taskv1.FleetAgent{resp.Agent})
}

func fleetAgentToProto(a app.FleetAgent) *taskv1.FleetAgent {
	return &taskv1.FleetAgent{AgentId: a.AgentID, MachineId: a.MachineID, TenantId: a.TenantID, Labels: a.Labels, Ip: a.IP,
		Slots: int32(a.Slots), FreeSlots: int32(a.FreeSlots), Version: a.Version, Isolation: a.Isolation, Warnings: a.Warnings,
		FirstSeenAt: ts(a.FirstSeenAt), LastHeartbeatAt: ts(a.LastHeartbeatAt), Lost: a.Lost, Drained: a.Drained,
		DrainedAt: ts(a.DrainedAt), RunningTaskIds: a.RunningTaskIDs, Seen: a.Seen}
}
