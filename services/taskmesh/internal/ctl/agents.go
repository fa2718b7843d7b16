package ctl

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
)

// The agents commands manage executor agents through the admin API with
// an operator key (docs/api/admin.md#agents).

func (a *app) agentsCommand() *cobra.Command {
	agents := &cobra.Command{
		Use:     "agents",
		Aliases: []string{"agent"},
		Short:   "Register, list, inspect, rotate, revoke and drain executor agents (operator key)",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	agents.AddCommand(a.agentRegisterCommand(), a.agentListCommand(), a.agentGetCommand(), a.agentRotateCommand(),
		a.agentRevokeCommand(), a.agentDrainCommand(true), a.agentDrainCommand(false), a.agentEventsCommand())
	return agents
}

// agentArgs checks for exactly one agent id.
var agentArgs = idArgsOf("agent")

func (a *app) agentRegisterCommand() *cobra.Command {
	var tenant, expires, tokenFile string
	var cidrs []string
	cmd := &cobra.Command{
		Use:   "register ID",
		Short: "Register an agent; its token is printed (or written to --token-file) once and cannot be shown again",
		Args:  agentArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminv1.RegisterAgentRequest{AgentId: args[0], TenantId: tenant}
			for _, c := range cidrs {
				if _, err := netip.ParsePrefix(c); err != nil {
					if _, aerr := netip.ParseAddr(c); aerr != nil {
						return usageErrorf(cmd, "--allow %q: neither a CIDR nor an address", c)
					}
				}
				req.AllowedCidrs = append(req.AllowedCidrs, c)
			}
			if expires != "" {
				at, err := parseExpiry(expires, a.now())
				if err != nil {
					return usageErrorf(cmd, "--expires: %v", err)
				}
				req.ExpiresAt = timestamppb.New(at)
			}
			file, err := tokenFileFor(cmd, tokenFile)
			if err != nil {
				return err
			}
			defer file.discard()
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.agents.RegisterAgent(ctx, req)
				if err != nil {
					return nil, nil, err
				}
				return a.showToken(resp.GetAgent(), resp.GetToken(), file)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "the tenant the agent serves (default: every tenant, the shared pool)")
	f.StringSliceVar(&cidrs, "allow", nil, "networks or addresses the token may be used from, comma-separated; "+
		"the agent may move within them (default: only the first address it connects from)")
	f.StringVar(&expires, "expires", "8760h", "expiry: a duration from now or an RFC 3339 time; \"never\" for none")
	f.StringVar(&tokenFile, "token-file", "", "write the token to this file (0600) instead of printing it")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if expires == "never" {
			expires = ""
		}
		return nil
	}
	return cmd
}

// tokenFileFor makes --token-file's pending file before a token is asked
// for (nil without one): a path that cannot be written is a usage error,
// not an agent with a token nobody has.
func tokenFileFor(cmd *cobra.Command, path string) (*pendingFile, error) {
	if path == "" {
		return nil, nil
	}
	f, err := createPending(path)
	if err != nil {
		return nil, usageErrorf(cmd, "--token-file %v", err)
	}
	return f, nil
}

// showToken prints an agent with its token, or writes the token to file
// (created 0600) and prints the agent; machine-readable output keeps the
// token field so scripts can read it.
func (a *app) showToken(agent *adminv1.Agent, token string, file *pendingFile) (proto.Message, func(io.Writer) error, error) {
	out := proto.Message(&adminv1.RegisterAgentResponse{Agent: agent, Token: token})
	if file != nil {
		_, err := file.Write([]byte(token + "\n"))
		if err == nil {
			err = file.commit()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("the token was issued but not saved: %w (revoke or rotate the agent)", err)
		}
		out = &adminv1.RegisterAgentResponse{Agent: agent}
	}
	return out, func(w io.Writer) error {
		if err := writeAgents(w, agent); err != nil {
			return err
		}
		if file != nil {
			_, err := fmt.Fprintf(w, "\nToken written to %s (0600).\n", file.path)
			return err
		}
		_, err := fmt.Fprintf(w, "\nToken (shown only now; give it to the agent with --token-file):\n%s\n", token)
		return err
	}, nil
}

func (a *app) agentListCommand() *cobra.Command {
	var tenant string
	var revoked, all bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List agents: status, last heartbeat, address, labels, slots, running tasks, version",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf(cmd, "--limit %d: want 1 to 1000", limit)
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				agents, next, err := collectPages(all, func(token string) ([]*adminv1.Agent, string, error) {
					resp, err := c.agents.ListAgents(ctx, &adminv1.ListAgentsRequest{TenantId: tenant, IncludeRevoked: revoked,
						PageSize: int32(limit), PageToken: token})
					return resp.GetAgents(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				out := &adminv1.ListAgentsResponse{Agents: agents, NextPageToken: next}
				return out, func(w io.Writer) error {
					if err := writeAgents(w, agents...); err != nil {
						return err
					}
					return writeMore(cmd.ErrOrStderr(), next, "agents")
				}, nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "only this tenant's agents")
	f.BoolVar(&revoked, "revoked", false, "include revoked agents")
	f.IntVar(&limit, "limit", 100, "agents per page")
	f.BoolVar(&all, "all", false, "list every page")
	return cmd
}

func (a *app) agentGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one agent in full, with its warnings, managed services and latest audit entries",
		Args:  agentArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.agents.GetAgent(ctx, &adminv1.GetAgentRequest{AgentId: args[0]})
				if err != nil {
					return nil, nil, err
				}
				events, err := c.agents.ListAgentEvents(ctx, &adminv1.ListAgentEventsRequest{AgentId: args[0], PageSize: 10})
				if err != nil {
					return nil, nil, err
				}
				return resp.GetAgent(), func(w io.Writer) error { return writeAgent(w, resp.GetAgent(), events.GetEvents()) }, nil
			})
		},
	}
}

func (a *app) agentRotateCommand() *cobra.Command {
	var expires, tokenFile string
	cmd := &cobra.Command{
		Use:   "rotate ID",
		Short: "Give the agent's token a new secret (the old one stops at once); write it to the agent's --token-file",
		Args:  agentArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminv1.RotateAgentTokenRequest{AgentId: args[0]}
			if expires != "" {
				at, err := parseExpiry(expires, a.now())
				if err != nil {
					return usageErrorf(cmd, "--expires: %v", err)
				}
				req.ExpiresAt = timestamppb.New(at)
			}
			file, err := tokenFileFor(cmd, tokenFile)
			if err != nil {
				return err
			}
			defer file.discard()
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.agents.RotateAgentToken(ctx, req)
				if err != nil {
					return nil, nil, err
				}
				return a.showToken(resp.GetAgent(), resp.GetToken(), file)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&expires, "expires", "", "a new expiry: a duration from now or an RFC 3339 time (default: keep)")
	f.StringVar(&tokenFile, "token-file", "", "write the new token to this file (0600), e.g. the agent's own --token-file")
	return cmd
}

func (a *app) agentRevokeCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke the agent's token; it is refused from the next call on",
		Args:  agentArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.agents.RevokeAgent(ctx, &adminv1.RevokeAgentRequest{AgentId: args[0], Reason: reason})
				return resp.GetAgent(), func(w io.Writer) error { return writeAgents(w, resp.GetAgent()) }, err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail")
	return cmd
}

func (a *app) agentDrainCommand(drain bool) *cobra.Command {
	use, short := "drain ID", "Stop leasing tasks to the agent; what it runs finishes"
	if !drain {
		use, short = "undrain ID", "Let a drained agent claim tasks again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  agentArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				var agent *adminv1.Agent
				var err error
				if drain {
					var resp *adminv1.DrainAgentResponse
					resp, err = c.agents.DrainAgent(ctx, &adminv1.DrainAgentRequest{AgentId: args[0]})
					agent = resp.GetAgent()
				} else {
					var resp *adminv1.UndrainAgentResponse
					resp, err = c.agents.UndrainAgent(ctx, &adminv1.UndrainAgentRequest{AgentId: args[0]})
					agent = resp.GetAgent()
				}
				return agent, func(w io.Writer) error { return writeAgents(w, agent) }, err
			})
		},
	}
}

func (a *app) agentEventsCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "The agent's audit trail, newest first",
		Args:  agentArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf(cmd, "--limit %d: want 1 to 1000", limit)
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.agents.ListAgentEvents(ctx, &adminv1.ListAgentEventsRequest{AgentId: args[0], PageSize: int32(limit)})
				return resp, func(w io.Writer) error { return writeAgentEvents(w, resp.GetEvents()) }, err
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "entries to show")
	return cmd
}

func writeAgents(out io.Writer, agents ...*adminv1.Agent) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATUS\tLAST HEARTBEAT\tADDRESS\tLABELS\tSLOTS\tRUNNING\tVERSION\tTENANT")
	for _, g := range agents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", g.GetAgentId(), g.GetStatus(), orDash(timeText(g.GetLastHeartbeatAt())),
			orDash(g.GetAddress()), orDash(strings.Join(g.GetLabels(), ",")), slotsText(g), g.GetRunningTasks(),
			orDash(g.GetVersion()), orDash(g.GetTenantId()))
	}
	return tw.Flush()
}

// slotsText shows free/total slots once the agent has heartbeated.
func slotsText(g *adminv1.Agent) string {
	if g.GetSlots() == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d free", g.GetFreeSlots(), g.GetSlots())
}

func writeAgent(out io.Writer, g *adminv1.Agent, events []*adminv1.AgentEvent) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, orDash(v)) }
	row("Agent", g.GetAgentId())
	row("Status", g.GetStatus())
	row("Tenant", g.GetTenantId())
	row("Machine", g.GetMachineId())
	row("Address", g.GetAddress())
	row("Labels", strings.Join(g.GetLabels(), ","))
	row("Slots", slotsText(g))
	row("Running", strings.TrimSpace(fmt.Sprintf("%d %s", g.GetRunningTasks(), strings.Join(g.GetRunningTaskIds(), " "))))
	row("Version", g.GetVersion())
	row("Isolation", g.GetIsolation())
	for _, w := range g.GetWarnings() {
		row("Warning", w)
	}
	row("Last heartbeat", timeText(g.GetLastHeartbeatAt()))
	row("First seen", timeText(g.GetFirstSeenAt()))
	if g.GetDrained() {
		row("Drained", timeText(g.GetDrainedAt()))
	}
	row("Token", fmt.Sprintf("%s (tma_%s_…)", g.GetTokenId(), g.GetTokenPrefix()))
	row("Bound to", g.GetBoundIp())
	row("Allowed", strings.Join(g.GetAllowedCidrs(), ","))
	row("Created", timeText(g.GetCreatedAt()))
	row("Expires", timeText(g.GetExpiresAt()))
	row("Rotated", timeText(g.GetRotatedAt()))
	if g.GetRevokedAt() != nil {
		row("Revoked", timeText(g.GetRevokedAt())+" ("+g.GetRevokedReason()+")")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(g.GetServices()) > 0 {
		fmt.Fprintln(out, "\nServices:")
		if err := writeAgentServices(out, g.GetServices()); err != nil {
			return err
		}
	}
	if len(events) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nRecent events:")
	return writeAgentEvents(out, events)
}

// writeAgentServices lists the managed services on an agent, of every
// tenant, with the state that agent last reported.
func writeAgentServices(out io.Writer, svcs []*adminv1.AgentManagedService) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tNAME\tVERSION\tDESIRED\tCURRENT\tPID\tRESTARTS\tLAST HEARTBEAT")
	for _, s := range svcs {
		pid := "-"
		if s.GetPid() != 0 {
			pid = fmt.Sprint(s.GetPid())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.GetServiceId(), orDash(s.GetTenantId()), s.GetName(),
			orDash(s.GetVersion()), s.GetDesiredState(), s.GetCurrentState(), pid, s.GetRestarts(),
			orDash(timeText(s.GetLastHeartbeat())))
	}
	return tw.Flush()
}

func writeAgentEvents(out io.Writer, events []*adminv1.AgentEvent) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tBY\tIP\tDETAILS")
	for _, e := range events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", timeText(e.GetTimestamp()), e.GetAction(), e.GetUserId(), orDash(e.GetIp()), e.GetDetails())
	}
	return tw.Flush()
}
