package ctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
)

// The services commands call ManagedServiceService (docs/api/services.md)
// as a tenant.

func (a *app) servicesCommand() *cobra.Command {
	svcs := &cobra.Command{
		Use:     "services",
		Aliases: []string{"service"},
		Short:   "Declare, list, inspect, update and delete managed services (sidecars the agents keep alive)",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	svcs.AddCommand(a.serviceCreateCommand(), a.serviceListCommand(), a.serviceGetCommand(), a.serviceUpdateCommand(),
		a.serviceDeleteCommand())
	return svcs
}

func services(c *conn) managedv1.ManagedServiceServiceClient {
	return managedv1.NewManagedServiceServiceClient(c.cc)
}

func (a *app) serviceCreateCommand() *cobra.Command {
	var (
		r     managedv1.CreateServiceRequest
		grace int32
		env   []string
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME --command CMD (--agent ID | --label L…)",
		Short: "Declare a managed service on one agent or on every agent with the labels",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if r.GetName() == "" || r.GetCommand() == "" {
				return usageErrorf(cmd, "--name and --command are required")
			}
			if r.GetAgentId() != "" && len(r.GetLabels()) > 0 {
				return usageErrorf(cmd, "--agent and --label: give one (an agent, or every agent with the labels)")
			}
			if cmd.Flags().Changed("grace-period") {
				r.GracePeriodSec = &grace
			}
			vars, err := parseEnv(env)
			if err != nil {
				return usageErrorf(cmd, "%v", err)
			}
			r.Env = vars
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := services(c).CreateService(ctx, &r)
				return resp.GetService(), serviceTable(resp.GetService()), err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Name, "name", "", "the service's name")
	f.StringVar(&r.Version, "version", "", "its version (default 1)")
	f.StringVar(&r.Command, "command", "", "the program to run (directly, no shell)")
	f.StringArrayVar(&r.Args, "arg", nil, "an argument (repeat for more)")
	f.StringArrayVar(&env, "env", nil, "NAME=VALUE (repeat for more)")
	f.StringVar(&r.RestartPolicy, "restart-policy", "", "always (default), on-failure or never")
	f.StringVar(&r.DesiredState, "desired-state", "", "running (default) or stopped")
	f.StringVar(&r.AgentId, "agent", "", "the agent to run it on")
	f.StringArrayVar(&r.Labels, "label", nil, "run it on every agent with this label (repeat for more)")
	f.Int32Var(&grace, "grace-period", 10, "seconds between SIGTERM and SIGKILL")
	return cmd
}

func parseEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func (a *app) serviceListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the tenant's managed services with their agents, states, processes and restarts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := services(c).ListServices(ctx, &managedv1.ListServicesRequest{})
				return resp, func(w io.Writer) error { return writeServices(w, resp.GetServices()) }, err
			})
		},
	}
}

func (a *app) serviceGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a managed service and its instances",
		Args:  idArgsOf("service"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := services(c).GetService(ctx, &managedv1.GetServiceRequest{ServiceId: args[0]})
				return resp.GetService(), serviceTable(resp.GetService()), err
			})
		},
	}
}

func (a *app) serviceUpdateCommand() *cobra.Command {
	var (
		desired, version, command, policy string
		args                              []string
	)
	cmd := &cobra.Command{
		Use:   "update ID [--desired-state running|stopped] [--version V [--command C] [--arg A…]]",
		Short: "Start or stop a managed service, or roll it to a new version",
		Args:  idArgsOf("service"),
		RunE: func(cmd *cobra.Command, ids []string) error {
			r := &managedv1.UpdateServiceRequest{ServiceId: ids[0], Args: args}
			for flag, dst := range map[string]**string{"desired-state": &r.DesiredState, "version": &r.Version,
				"command": &r.Command, "restart-policy": &r.RestartPolicy} {
				if cmd.Flags().Changed(flag) {
					v, _ := cmd.Flags().GetString(flag)
					*dst = &v
				}
			}
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := services(c).UpdateService(ctx, r)
				return resp.GetService(), serviceTable(resp.GetService()), err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&desired, "desired-state", "", "running or stopped")
	f.StringVar(&version, "version", "", "a new version: agents replace the process")
	f.StringVar(&command, "command", "", "the new version's program")
	f.StringArrayVar(&args, "arg", nil, "the new version's arguments (repeat for more)")
	f.StringVar(&policy, "restart-policy", "", "always, on-failure or never")
	return cmd
}

func (a *app) serviceDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a managed service; its agents stop it",
		Args:  idArgsOf("service"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := services(c).DeleteService(ctx, &managedv1.DeleteServiceRequest{ServiceId: args[0]})
				return resp, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s deleted\n", args[0]); return err }, err
			})
		},
	}
}

// serviceAgents is where a service runs: its agent, or its labels.
func serviceAgents(s *managedv1.ManagedService) string {
	if s.GetAgentId() != "" {
		return s.GetAgentId()
	}
	return "labels:" + strings.Join(s.GetLabels(), ",")
}

// pidText is a process id, "-" for none (0: not running).
func pidText(pid int32) string {
	if pid == 0 {
		return "-"
	}
	return strconv.Itoa(int(pid))
}

// writeServices is the list's table: one line per service.
func writeServices(w io.Writer, svcs []*managedv1.ManagedService) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tVERSION\tAGENT\tDESIRED\tCURRENT\tPID\tRESTARTS\tLAST HEARTBEAT")
	for _, s := range svcs {
		last := "-"
		if s.GetLastHeartbeat() != nil {
			last = s.GetLastHeartbeat().AsTime().UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.GetServiceId(), s.GetName(), s.GetVersion(), serviceAgents(s),
			s.GetDesiredState(), s.GetCurrentState(), pidText(s.GetPid()), s.GetRestarts(), last)
	}
	return tw.Flush()
}

// serviceTable shows one service and its instances.
func serviceTable(s *managedv1.ManagedService) func(io.Writer) error {
	return func(w io.Writer) error {
		if err := writeServices(w, []*managedv1.ManagedService{s}); err != nil {
			return err
		}
		if len(s.GetInstances()) == 0 {
			return nil
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nAGENT\tSTATE\tVERSION\tPID\tRESTARTS\tERROR")
		for _, in := range s.GetInstances() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", in.GetAgentId(), in.GetCurrentState(), in.GetVersion(), pidText(in.GetPid()),
				in.GetRestarts(), orDash(in.GetError()))
		}
		return tw.Flush()
	}
}
