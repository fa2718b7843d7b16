package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	"github.com/taskmesh/taskmesh/services/consumers/usage"
)

func (a *app) usageCommand() *cobra.Command {
	var (
		req     usagev1.GetUsageRequest
		csv, op bool
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Metered usage, priced (the tenant's with an API key, every tenant's with --operator)",
		Long: `usage sums GPU seconds (running time × GPUs requested), CPU task seconds, seconds of video
generated and pipeline stage seconds between --from and --to (default: this month), grouped
by day, model, queue, flavor, tenant or stage, and prices them with the operator's price table.
--csv prints the same rows as CSV.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch req.GetGroupBy() {
			case "day", "model", "queue", "flavor", "tenant", "stage":
			default:
				return usageErrorf(cmd, "--group-by %s: want day, model, queue, flavor, tenant or stage", req.GetGroupBy())
			}
			if req.GetTenantId() != "" && !op {
				return usageErrorf(cmd, "--tenant needs --operator")
			}
			if err := checkBounds(req.GetFrom(), req.GetTo()); err != nil {
				return usageErrorf(cmd, "%v", err)
			}
			return a.consumerCall(cmd, op, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.usage.GetUsage(ctx, &req)
				if csv {
					return resp, func(w io.Writer) error { return usage.WriteCSV(w, resp) }, err
				}
				return resp, func(w io.Writer) error { return writeUsage(w, resp) }, err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.From, "from", "", "from this day (YYYY-MM-DD) or time (RFC 3339), inclusive (default: the 1st of this month)")
	f.StringVar(&req.To, "to", "", "to this day (YYYY-MM-DD) or time (RFC 3339), inclusive (default: now)")
	f.StringVar(&req.GroupBy, "group-by", "day", "day, model, queue, flavor, tenant or stage")
	f.StringVar(&req.TenantId, "tenant", "", "with --operator: one tenant's usage")
	f.BoolVar(&csv, "csv", false, "print CSV")
	f.BoolVar(&op, "operator", false, "use the operator key: every tenant's usage")
	return cmd
}

func writeUsage(w io.Writer, r *usagev1.GetUsageResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tGPU_SECONDS\tCPU_SECONDS\tVIDEO_SECONDS\tSTAGE_SECONDS\tITEMS\tAMOUNT (%s)\t\n",
		strings.ToUpper(r.GetGroupBy()),
		r.GetCurrency())
	for _, row := range append(r.GetRows(), r.GetTotal()) {
		if row == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.4f\t\n", row.GetKey(), row.GetGpuSeconds(), row.GetCpuSeconds(),
			row.GetVideoSeconds(), row.GetStageSeconds(), row.GetItems(), row.GetAmount())
	}
	return tw.Flush()
}
