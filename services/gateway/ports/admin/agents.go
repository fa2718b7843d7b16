package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
)

// Agent statuses (adminv1.Agent.status).
const (
	StatusRegistered = "registered"
	StatusOnline     = "online"
	StatusOffline    = "offline"
	StatusDraining   = "draining"
	StatusDrained    = "drained"
	StatusRevoked    = "revoked"
	StatusExpired    = "expired"
)

// Fleet is the scheduler's view of the agents (taskv1.AgentFleetService).
type Fleet interface {
	ListFleetAgents(ctx context.Context, in *taskv1.ListFleetAgentsRequest, opts ...grpc.CallOption) (*taskv1.ListFleetAgentsResponse, error)
	SetAgentDrain(ctx context.Context, in *taskv1.SetAgentDrainRequest, opts ...grpc.CallOption) (*taskv1.SetAgentDrainResponse, error)
}

// AgentServer implements adminv1.AgentServiceServer: the agents'
// credentials from the store the gateway owns, joined with what the
// scheduler knows from their heartbeats. Like Server, every method checks
// its caller and validates its request itself.
type AgentServer struct {
	adminv1.UnimplementedAgentServiceServer
	store *credentials.Store
	fleet Fleet
	now   func() time.Time
	v     protovalidate.Validator
	log   *slog.Logger
}

// NewAgentServer returns the agent fleet's admin service on store and the
// scheduler's fleet. now is the clock (time.Now if nil).
func NewAgentServer(store *credentials.Store, fleet Fleet, now func() time.Time, log *slog.Logger) (*AgentServer, error) {
	v := protovalidate.GlobalValidator // shared by the process (docs/decisions/0129-one-openapi-document-and-validator-per-process.md)
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &AgentServer{store: store, fleet: fleet, now: now, v: v, log: log}, nil
}

func (s *AgentServer) check(ctx context.Context, req proto.Message) error {
	return checkOperator(ctx, s.v, req, s.log)
}

// actor is the operator making a change, for the audit trail.
func actor(ctx context.Context) credentials.Actor {
	p, _ := authn.FromContext(ctx)
	return credentials.Actor{ID: p.Subject, IP: p.RemoteIP}
}

// RegisterAgent implements AgentService.
func (s *AgentServer) RegisterAgent(ctx context.Context, req *adminv1.RegisterAgentRequest) (*adminv1.RegisterAgentResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	spec := credentials.AgentSpec{AgentID: req.GetAgentId(), TenantID: req.GetTenantId(), AllowedCIDRs: req.GetAllowedCidrs()}
	if req.ExpiresAt != nil {
		at := req.GetExpiresAt().AsTime()
		spec.ExpiresAt = &at
	}
	tok, secret, err := s.store.RegisterAgent(ctx, spec, actor(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	// A registration starts the agent afresh: undrained, also when an
	// earlier token of the same id was revoked (which drains it).
	if _, err := s.fleet.SetAgentDrain(outbound.OwnCall(ctx), &taskv1.SetAgentDrainRequest{AgentId: tok.AgentID}); err != nil {
		s.log.WarnContext(ctx, "undraining a registered agent failed", "agent_id", tok.AgentID, "err", err)
	}
	return &adminv1.RegisterAgentResponse{Agent: s.agent(tok, s.fleetOf(ctx, tok.AgentID)), Token: secret}, nil
}

// ListAgents implements AgentService. The page token is the last agent id
// of the previous page.
func (s *AgentServer) ListAgents(ctx context.Context, req *adminv1.ListAgentsRequest) (*adminv1.ListAgentsResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultPageSize
	}
	size = min(size, maxPageSize)
	toks, err := s.store.ListAgents(ctx, credentials.AgentFilter{TenantID: req.GetTenantId(), IncludeRevoked: req.GetIncludeRevoked(),
		After: req.GetPageToken(), Limit: size + 1})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp := &adminv1.ListAgentsResponse{}
	if len(toks) > size {
		toks = toks[:size]
		resp.NextPageToken = toks[size-1].AgentID
	}
	ids := make([]string, len(toks))
	for i, t := range toks {
		ids[i] = t.AgentID
	}
	fleet, err := s.fleetAgents(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, t := range toks {
		resp.Agents = append(resp.Agents, s.agent(t, fleet[t.AgentID]))
	}
	return resp, nil
}

// GetAgent implements AgentService.
func (s *AgentServer) GetAgent(ctx context.Context, req *adminv1.GetAgentRequest) (*adminv1.GetAgentResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	tok, err := s.store.Agent(ctx, req.GetAgentId())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	fleet, err := s.fleetAgents(ctx, []string{tok.AgentID})
	if err != nil {
		return nil, err
	}
	return &adminv1.GetAgentResponse{Agent: s.agent(tok, fleet[tok.AgentID])}, nil
}

// RotateAgentToken implements AgentService.
func (s *AgentServer) RotateAgentToken(ctx context.Context, req *adminv1.RotateAgentTokenRequest) (*adminv1.RotateAgentTokenResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	var expires *time.Time
	if req.ExpiresAt != nil {
		at := req.GetExpiresAt().AsTime()
		expires = &at
	}
	tok, secret, err := s.store.RotateAgent(ctx, req.GetAgentId(), expires, actor(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &adminv1.RotateAgentTokenResponse{Agent: s.agent(tok, s.fleetOf(ctx, tok.AgentID)), Token: secret}, nil
}

// RevokeAgent implements AgentService.
func (s *AgentServer) RevokeAgent(ctx context.Context, req *adminv1.RevokeAgentRequest) (*adminv1.RevokeAgentResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	tok, err := s.store.RevokeAgent(ctx, req.GetAgentId(), req.GetReason(), actor(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &adminv1.RevokeAgentResponse{Agent: s.agent(tok, s.fleetOf(ctx, tok.AgentID))}, nil
}

// DrainAgent implements AgentService.
func (s *AgentServer) DrainAgent(ctx context.Context, req *adminv1.DrainAgentRequest) (*adminv1.DrainAgentResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	a, err := s.setDrain(ctx, req.GetAgentId(), true)
	if err != nil {
		return nil, err
	}
	return &adminv1.DrainAgentResponse{Agent: a}, nil
}

// UndrainAgent implements AgentService.
func (s *AgentServer) UndrainAgent(ctx context.Context, req *adminv1.UndrainAgentRequest) (*adminv1.UndrainAgentResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	a, err := s.setDrain(ctx, req.GetAgentId(), false)
	if err != nil {
		return nil, err
	}
	return &adminv1.UndrainAgentResponse{Agent: a}, nil
}

// setDrain drains or undrains a registered agent in the scheduler, which
// decides claims, and records it in the agent's audit trail.
func (s *AgentServer) setDrain(ctx context.Context, agentID string, drained bool) (*adminv1.Agent, error) {
	tok, err := s.store.Agent(ctx, agentID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp, err := s.fleet.SetAgentDrain(outbound.OwnCall(ctx), &taskv1.SetAgentDrainRequest{AgentId: agentID, Drained: drained})
	if err != nil {
		return nil, s.upstream(ctx, err)
	}
	action := credentials.ActionUndrained
	if drained {
		action = credentials.ActionDrained
	}
	by := actor(ctx)
	if err := s.store.RecordAgentEvent(ctx, credentials.AgentEvent{Action: action, AgentID: agentID, Actor: by.ID, IP: by.IP,
		Details: map[string]string{"running_tasks": fmt.Sprint(len(resp.GetAgent().GetRunningTaskIds()))}}); err != nil {
		// The drain holds; only its record is missing: say so in the log
		// rather than fail a change that happened.
		s.log.ErrorContext(ctx, "recording an agent's drain failed", "agent_id", agentID, "drained", drained, "err", err)
	}
	s.log.InfoContext(ctx, "agent drain changed", "agent_id", agentID, "drained", drained, "admin_key_id", by.ID)
	return s.agent(tok, resp.GetAgent()), nil
}

// ListAgentEvents implements AgentService.
func (s *AgentServer) ListAgentEvents(ctx context.Context, req *adminv1.ListAgentEventsRequest) (*adminv1.ListAgentEventsResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	if _, err := s.store.Agent(ctx, req.GetAgentId()); err != nil {
		return nil, s.fail(ctx, err)
	}
	events, err := s.store.AgentEvents(ctx, req.GetAgentId(), int(req.GetPageSize()))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp := &adminv1.ListAgentEventsResponse{Events: make([]*adminv1.AgentEvent, 0, len(events))}
	for _, e := range events {
		resp.Events = append(resp.Events, agentEvent(e))
	}
	return resp, nil
}

// fleetAgents asks the scheduler about ids; an unreachable scheduler fails
// the call (a list without heartbeats would look like a fleet that is down).
func (s *AgentServer) fleetAgents(ctx context.Context, ids []string) (map[string]*taskv1.FleetAgent, error) {
	out := map[string]*taskv1.FleetAgent{}
	if len(ids) == 0 {
		return out, nil
	}
	resp, err := s.fleet.ListFleetAgents(outbound.OwnCall(ctx), &taskv1.ListFleetAgentsRequest{AgentIds: ids})
	if err != nil {
		return nil, s.upstream(ctx, err)
	}
	for _, a := range resp.GetAgents() {
		out[a.GetAgentId()] = a
	}
	return out, nil
}

// fleetOf is fleetAgents for the answer of a change that already
// happened: without the scheduler the answer shows the credential only.
func (s *AgentServer) fleetOf(ctx context.Context, agentID string) *taskv1.FleetAgent {
	resp, err := s.fleet.ListFleetAgents(outbound.OwnCall(ctx), &taskv1.ListFleetAgentsRequest{AgentIds: []string{agentID}})
	if err != nil {
		s.log.WarnContext(ctx, "the scheduler's view of an agent is unavailable", "agent_id", agentID, "err", err)
		return nil
	}
	for _, a := range resp.GetAgents() {
		if a.GetAgentId() == agentID {
			return a
		}
	}
	return nil
}

// upstream passes a scheduler status on, logging what the caller will not
// see.
func (s *AgentServer) upstream(ctx context.Context, err error) error {
	st := status.Convert(err)
	if st.Code() == codes.Unavailable || st.Code() == codes.Internal || st.Code() == codes.Unknown {
		s.log.ErrorContext(ctx, "the scheduler's agent fleet failed", "code", st.Code().String(), "err", st.Message())
	}
	return st.Err()
}

func (s *AgentServer) fail(ctx context.Context, err error) error {
	if errors.Is(err, credentials.ErrRevoked) {
		return grpcserver.Status(codes.FailedPrecondition, 409, "REVOKED", err.Error())
	}
	return storeStatus(ctx, s.log, err)
}

// agent joins a token and the scheduler's view of its agent (f may be nil).
func (s *AgentServer) agent(t credentials.AgentToken, f *taskv1.FleetAgent) *adminv1.Agent {
	a := &adminv1.Agent{
		AgentId: t.AgentID, TenantId: t.TenantID, TokenId: t.ID, TokenPrefix: t.Prefix,
		CreatedAt: timestamppb.New(t.CreatedAt), ExpiresAt: ts(t.ExpiresAt), RotatedAt: ts(t.RotatedAt),
		RevokedAt: ts(t.RevokedAt), RevokedReason: t.RevokedReason,
	}
	for _, p := range t.AllowedCIDRs {
		a.AllowedCidrs = append(a.AllowedCidrs, p.String())
	}
	if t.BoundIP.IsValid() {
		a.BoundIp = t.BoundIP.String()
	}
	if f != nil {
		a.Drained, a.DrainedAt = f.GetDrained(), f.GetDrainedAt()
		if f.GetSeen() {
			a.MachineId, a.Address, a.Labels, a.Slots, a.FreeSlots = f.GetMachineId(), f.GetIp(), f.GetLabels(), f.GetSlots(), f.GetFreeSlots()
			a.Version, a.LastHeartbeatAt, a.FirstSeenAt = f.GetVersion(), f.GetLastHeartbeatAt(), f.GetFirstSeenAt()
			a.Isolation, a.Warnings = f.GetIsolation(), f.GetWarnings()
		}
		a.RunningTaskIds = f.GetRunningTaskIds()
		a.RunningTasks = int32(len(a.RunningTaskIds))
		for _, sv := range f.GetServices() {
			a.Services = append(a.Services, &adminv1.AgentManagedService{ServiceId: sv.GetServiceId(),
				TenantId: sv.GetTenantId(), Name: sv.GetName(), Version: sv.GetVersion(),
				DesiredState: sv.GetDesiredState(), CurrentState: sv.GetCurrentState(), Pid: sv.GetPid(),
				Restarts: sv.GetRestarts(), LastHeartbeat: sv.GetLastHeartbeat()})
		}
	}
	a.Status = s.status(t, f)
	return a
}

// status sums an agent up (see adminv1.Agent.status).
func (s *AgentServer) status(t credentials.AgentToken, f *taskv1.FleetAgent) string {
	switch {
	case t.RevokedAt != nil:
		return StatusRevoked
	case t.ExpiresAt != nil && !s.now().Before(*t.ExpiresAt):
		return StatusExpired
	case f.GetDrained() && len(f.GetRunningTaskIds()) > 0:
		return StatusDraining
	case f.GetDrained():
		return StatusDrained
	case !f.GetSeen():
		return StatusRegistered
	case f.GetLost():
		return StatusOffline
	}
	return StatusOnline
}

func agentEvent(e credentials.AgentEvent) *adminv1.AgentEvent {
	details, _ := jsonObject(e.Details)
	return &adminv1.AgentEvent{Id: e.ID, Timestamp: timestamppb.New(e.At), Action: e.Action, Resource: "agent",
		ResourceId: e.AgentID, UserId: e.Actor, Details: details, Ip: e.IP}
}

// revokeTimeout bounds the drain that follows a revocation.
const revokeTimeout = 5 * time.Second

// DrainRevoked drains an agent whose token was just revoked (see
// credentials.Store.OnAgentRevoked), as the gateway itself: a claim the
// agent started before the revocation may still be waiting in the
// scheduler. A failure is logged: the token is revoked either way, and a
// claim leased meanwhile can start nothing (every later call is refused,
// at once on this gateway and within credentials.KeyCacheTTL on others).
func (s *AgentServer) DrainRevoked(ctx context.Context, agentID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	ctx = authn.NewContext(ctx, authn.Principal{Kind: authn.KindAdmin, Subject: credentials.System.ID})
	if _, err := s.fleet.SetAgentDrain(outbound.OwnCall(ctx), &taskv1.SetAgentDrainRequest{AgentId: agentID, Drained: true}); err != nil {
		s.log.ErrorContext(ctx, "draining a revoked agent failed", "agent_id", agentID, "err", err)
	}
}
