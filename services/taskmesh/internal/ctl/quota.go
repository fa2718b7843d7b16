package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// Quota commands act as the platform's operator directly on the quota
// service (its internal gRPC address and internal token): producing and
// unsubscribing quotas, clusters and inventory are operator actions that
// tenants' API keys cannot perform.
const (
	EnvQuotaServer       = "TASKMESH_QUOTA_SERVER"
	EnvInternalTokenFile = "TASKMESH_INTERNAL_TOKEN_FILE"
	DefaultQuotaServer   = "127.0.0.1:9092"
)

type quotaFlags struct {
	server, tokenFile string
}

func (a *app) quotaCommand() *cobra.Command {
	var qf quotaFlags
	q := &cobra.Command{
		Use:   "quota",
		Short: "Operate the quota service: tenants, clusters, inventory, quotas, WorkGroups",
		Long: `Operate the quota service directly, as the platform's operator.

The quota service's address comes from --quota-server, ` + EnvQuotaServer + ` or
` + DefaultQuotaServer + `; the internal token from the file named by
--internal-token-file or ` + EnvInternalTokenFile + `. Plaintext is used only
for loopback addresses unless --insecure is given.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	f := q.PersistentFlags()
	f.StringVar(&qf.server, "quota-server", "", "quota service gRPC address (env "+EnvQuotaServer+")")
	f.StringVar(&qf.tokenFile, "internal-token-file", "", "file holding the internal token (env "+EnvInternalTokenFile+")")
	call := func(cmd *cobra.Command, fn func(context.Context, quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error)) error {
		return a.quotaCall(cmd, qf, fn)
	}

	tenants := &cobra.Command{Use: "tenants", Short: "Register and list tenants", Args: cobra.ArbitraryArgs, RunE: groupRunE}
	tenants.AddCommand(&cobra.Command{
		Use: "register ID NAME", Short: "Register (or rename) a tenant", Args: exactArgs(2, "a tenant id and a name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.RegisterTenant(ctx, &quotav1.RegisterTenantRequest{TenantId: args[0], Name: args[1]})
				return r.GetTenant(), func(w io.Writer) error { return tenantTable(w, r.GetTenant()) }, err
			})
		},
	}, &cobra.Command{
		Use: "list", Short: "List tenants", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.ListTenants(ctx, &quotav1.ListTenantsRequest{})
				return r, func(w io.Writer) error { return tenantTable(w, r.GetTenants()...) }, err
			})
		},
	})

	clusters := &cobra.Command{Use: "clusters", Short: "Create and list clusters", Args: cobra.ArbitraryArgs, RunE: groupRunE}
	var description string
	create := &cobra.Command{
		Use: "create NAME", Short: "Record a compute cluster", Args: exactArgs(1, "a cluster name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.CreateCluster(ctx, &quotav1.CreateClusterRequest{Name: args[0], Description: description})
				return r.GetCluster(), func(w io.Writer) error { return clusterTable(w, r.GetCluster()) }, err
			})
		},
	}
	create.Flags().StringVar(&description, "description", "", "what the cluster is")
	clusters.AddCommand(create, &cobra.Command{
		Use: "list", Short: "List clusters with their inventory", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.ListClusters(ctx, &quotav1.ListClustersRequest{})
				return r, func(w io.Writer) error { return clusterTable(w, r.GetClusters()...) }, err
			})
		},
	})

	inventory := &cobra.Command{Use: "inventory", Short: "Show and set a cluster's GPUs", Args: cobra.ArbitraryArgs, RunE: groupRunE}
	inventory.AddCommand(&cobra.Command{
		Use: "set CLUSTER MACHINE_TYPE GPUS", Short: "Set how many GPUs of a machine type the cluster has",
		Args: exactArgs(3, "a cluster, a machine type and a GPU count"),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseInt(args[2], 10, 32)
			if err != nil || n < 0 {
				return usageErrorf(cmd, "GPUS must be a count, not %q", args[2])
			}
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.SetInventory(ctx, &quotav1.SetInventoryRequest{Cluster: args[0], MachineType: args[1], TotalGpus: int32(n)})
				return r.GetInventory(), func(w io.Writer) error { return inventoryTable(w, r.GetInventory()) }, err
			})
		},
	}, &cobra.Command{
		Use: "get CLUSTER", Short: "Show the cluster's GPUs per machine type", Args: exactArgs(1, "a cluster"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.GetInventory(ctx, &quotav1.GetInventoryRequest{Cluster: args[0]})
				return r, func(w io.Writer) error { return inventoryTable(w, r.GetInventory()...) }, err
			})
		},
	})

	var (
		spec                                  quotav1.QuotaSpec
		tenant, cluster, kind, parent, reason string
		min, max                              int32
		listTenant                            string
	)
	produce := &cobra.Command{
		Use:   "create",
		Short: "Produce a quota (a root with its standard children, or --parent)",
		Args:  exactArgs(0, "flags only"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec.MinUnits, spec.MaxUnits = min, max
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: tenant, Cluster: cluster, Kind: kind,
					ParentId: parent, Spec: &spec})
				return r.GetQuota(), func(w io.Writer) error { return quotaTree(w, r.GetQuota()) }, err
			})
		},
	}
	pf := produce.Flags()
	pf.StringVar(&tenant, "tenant", "", "tenant id (roots)")
	pf.StringVar(&cluster, "cluster", "", "cluster (roots)")
	pf.StringVar(&kind, "kind", "", "GU or CU (roots)")
	pf.StringVar(&parent, "parent", "", "add the quota under this quota id")
	pf.StringVar(&spec.Name, "name", "", "quota name")
	pf.StringVar(&spec.MachineType, "machine-type", "", "GPU machine type (GU roots)")
	pf.Int32Var(&min, "min", 0, "min units")
	pf.Int32Var(&max, "max", 1, "max units")
	pf.BoolVar(&spec.Background, "background", false, "the background quota of its root (second level)")

	var umin, umax int32
	update := &cobra.Command{
		Use: "update QUOTA_ID", Short: "Change a quota's min and max units", Args: exactArgs(1, "a quota id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				// Only the flags given change: the other limit keeps its value.
				req := &quotav1.UpdateQuotaRequest{QuotaId: args[0]}
				if cmd.Flags().Changed("min") {
					req.MinUnits = &umin
				}
				if cmd.Flags().Changed("max") {
					req.MaxUnits = &umax
				}
				r, err := c.UpdateQuota(ctx, req)
				return r.GetQuota(), func(w io.Writer) error { return quotaTree(w, r.GetQuota()) }, err
			})
		},
	}
	update.Flags().Int32Var(&umin, "min", 0, "min units (unchanged when not given)")
	update.Flags().Int32Var(&umax, "max", 0, "max units (unchanged when not given)")
	unsubscribe := &cobra.Command{
		Use: "delete QUOTA_ID", Short: "Unsubscribe a quota and its subtree", Args: exactArgs(1, "a quota id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.DeleteQuota(ctx, &quotav1.DeleteQuotaRequest{QuotaId: args[0], Reason: reason})
				return r.GetQuota(), func(w io.Writer) error { return quotaTree(w, r.GetQuota()) }, err
			})
		},
	}
	unsubscribe.Flags().StringVar(&reason, "reason", "", "why")
	list := &cobra.Command{
		Use: "list", Short: "List quotas", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.ListQuotas(ctx, &quotav1.ListQuotasRequest{TenantId: listTenant, PageSize: 500})
				return r, func(w io.Writer) error { return quotaTable(w, r.GetQuotas()) }, err
			})
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "only this tenant's")
	get := &cobra.Command{
		Use: "get QUOTA_ID", Short: "Show a quota with its subtree and WorkGroups", Args: exactArgs(1, "a quota id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.GetQuota(ctx, &quotav1.GetQuotaRequest{QuotaId: args[0]})
				return r.GetQuota(), func(w io.Writer) error { return quotaTree(w, r.GetQuota()) }, err
			})
		},
	}
	workgroups := &cobra.Command{
		Use: "workgroups", Short: "List WorkGroups", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.ListWorkGroups(ctx, &quotav1.ListWorkGroupsRequest{TenantId: listTenant})
				return r, func(w io.Writer) error { return workGroupTable(w, r.GetWorkGroups()) }, err
			})
		},
	}
	check := &cobra.Command{
		Use: "check TENANT [QUOTA]", Short: "Run the submit-time GU quota check", Args: rangeArgs(1, 2, "a tenant and maybe a quota"),
		RunE: func(cmd *cobra.Command, args []string) error {
			quota := ""
			if len(args) == 2 {
				quota = args[1]
			}
			return call(cmd, func(ctx context.Context, c quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error) {
				r, err := c.CheckGUQuota(ctx, &quotav1.CheckGUQuotaRequest{TenantId: args[0], Quota: quota})
				return r, func(w io.Writer) error { return workGroupTable(w, []*quotav1.WorkGroup{r.GetWorkGroup()}) }, err
			})
		},
	}
	q.AddCommand(tenants, clusters, inventory, produce, update, unsubscribe, list, get, workgroups, check)
	return q
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return rangeArgs(n, n, what)
}

func rangeArgs(lo, hi int, what string) cobra.PositionalArgs {
	return usageArgs(func(_ *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return fmt.Errorf("want %s, got %d arguments", what, len(args))
		}
		return nil
	})
}

// quotaCall dials the quota service as the operator and runs one call.
func (a *app) quotaCall(cmd *cobra.Command, qf quotaFlags, call func(context.Context, quotav1.QuotaServiceClient) (proto.Message, func(io.Writer) error, error)) error {
	format, err := a.format(cmd)
	if err != nil {
		return err
	}
	server := first(qf.server, strings.TrimSpace(a.env.getenv(EnvQuotaServer)), DefaultQuotaServer)
	tokenFile := first(qf.tokenFile, strings.TrimSpace(a.env.getenv(EnvInternalTokenFile)))
	if tokenFile == "" {
		return usageErrorf(cmd, "no internal token: pass --internal-token-file or set %s", EnvInternalTokenFile)
	}
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		return fmt.Errorf("internal token: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return errors.New("internal token: the file is empty")
	}
	target, useTLS, err := transport(server, a.conn.tls, a.conn.insecure)
	if err != nil {
		return usageErrorf(cmd, "%v", err)
	}
	creds := insecure.NewCredentials()
	if useTLS {
		creds = credentials.NewTLS(nil)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithUserAgent("taskmesh-ctl"),
		grpc.WithChainUnaryInterceptor(unreachableUnary(server)))
	if err != nil {
		return fmt.Errorf("server %q: %w", server, err)
	}
	defer cc.Close()
	ctx, cancel := a.call(cmd.Context())
	defer cancel()
	ctx = authn.Outgoing(ctx, authn.Principal{Kind: authn.KindAdmin, Subject: "taskmesh-ctl"}, token)
	msg, write, err := call(ctx, quotav1.NewQuotaServiceClient(cc))
	if err != nil {
		return err
	}
	if format != formatTable {
		return writeProto(cmd.OutOrStdout(), format, msg)
	}
	return write(cmd.OutOrStdout())
}

func table(w io.Writer, header string, rows func(tw io.Writer)) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

func tenantTable(w io.Writer, ts ...*quotav1.Tenant) error {
	return table(w, "TENANT\tNAME\tCREATED", func(tw io.Writer) {
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.GetTenantId(), t.GetName(), timeText(t.GetCreatedAt()))
		}
	})
}

func clusterTable(w io.Writer, cs ...*quotav1.Cluster) error {
	return table(w, "CLUSTER\tINVENTORY\tDESCRIPTION", func(tw io.Writer) {
		for _, c := range cs {
			var inv []string
			for _, i := range c.GetInventory() {
				inv = append(inv, fmt.Sprintf("%s %d/%d free", i.GetMachineType(), i.GetAvailableGpus(), i.GetTotalGpus()))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.GetName(), orDash(strings.Join(inv, ", ")), orDash(c.GetDescription()))
		}
	})
}

func inventoryTable(w io.Writer, is ...*quotav1.Inventory) error {
	return table(w, "CLUSTER\tMACHINE TYPE\tTOTAL\tALLOCATED\tAVAILABLE", func(tw io.Writer) {
		for _, i := range is {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", i.GetCluster(), i.GetMachineType(), i.GetTotalGpus(), i.GetAllocatedGpus(), i.GetAvailableGpus())
		}
	})
}

func quotaRow(tw io.Writer, q *quotav1.Quota, indent string) {
	wg := "-"
	if w := q.GetWorkGroup(); w != nil {
		wg = fmt.Sprintf("%s %s (%d GPUs)", w.GetId(), w.GetStatus(), w.GetGpus())
		if w.GetReason() != "" {
			wg += ": " + w.GetReason()
		}
	}
	name := indent + q.GetName()
	if q.GetBackground() {
		name += " (background)"
	}
	status := q.GetStatus()
	if q.GetReason() != "" {
		status += ": " + q.GetReason()
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d-%d\t%s\t%s\t%s\n", q.GetId(), name, q.GetTenantId(), q.GetKind(), q.GetMinUnits(), q.GetMaxUnits(),
		orDash(q.GetMachineType()), status, wg)
}

const quotaHeader = "ID\tNAME\tTENANT\tKIND\tUNITS\tMACHINE TYPE\tSTATUS\tWORKGROUP"

func quotaTable(w io.Writer, qs []*quotav1.Quota) error {
	return table(w, quotaHeader, func(tw io.Writer) {
		for _, q := range qs {
			quotaRow(tw, q, "")
		}
	})
}

// quotaTree prints a quota and, indented, its subtree.
func quotaTree(w io.Writer, q *quotav1.Quota) error {
	return table(w, quotaHeader, func(tw io.Writer) {
		var walk func(*quotav1.Quota, string)
		walk = func(x *quotav1.Quota, indent string) {
			quotaRow(tw, x, indent)
			for _, c := range x.GetChildren() {
				walk(c, indent+"  ")
			}
		}
		walk(q, "")
	})
}

func workGroupTable(w io.Writer, ws []*quotav1.WorkGroup) error {
	return table(w, "WORKGROUP\tQUOTA\tTENANT\tCLUSTER\tMACHINE TYPE\tGPUS\tSTATUS", func(tw io.Writer) {
		for _, x := range ws {
			status := x.GetStatus()
			if x.GetReason() != "" {
				status += ": " + x.GetReason()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", x.GetId(), x.GetQuotaName(), x.GetTenantId(), x.GetCluster(),
				x.GetMachineType(), x.GetGpus(), status)
		}
	})
}
