package ctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
)

// consumerCall is taskCall with the operator key when operator is set
// (every tenant's entries, usage, deliveries), else the API key (the
// tenant's own).
func (a *app) consumerCall(cmd *cobra.Command, operator bool, call func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error)) error {
	a.conn.admin = operator
	return a.taskCall(cmd, call)
}

func (a *app) auditCommand() *cobra.Command {
	var (
		req       auditv1.ListAuditLogsRequest
		limit     int
		all, op   bool
		verbosity bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the audit log, newest first (the tenant's with an API key, every tenant's with --operator)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf(cmd, "--limit %d: want 1 to 1000", limit)
			}
			if req.GetTenantId() != "" && !op {
				return usageErrorf(cmd, "--tenant needs --operator")
			}
			if err := checkBounds(req.GetFrom(), req.GetTo()); err != nil {
				return usageErrorf(cmd, "%v", err)
			}
			req.PageSize = int32(limit)
			return a.consumerCall(cmd, op, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				logs, next, err := collectPages(all, func(token string) ([]*auditv1.AuditLog, string, error) {
					req.PageToken = token
					resp, err := c.audit.ListAuditLogs(ctx, &req)
					return resp.GetAuditLogs(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				out := &auditv1.ListAuditLogsResponse{AuditLogs: logs, NextPageToken: next}
				return out, func(w io.Writer) error {
					if err := writeAudit(w, out, verbosity); err != nil {
						return err
					}
					return writeMore(cmd.ErrOrStderr(), next, "entries")
				}, nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Resource, "resource", "", "task, task_group, template, job, tenant, cluster, quota, cluster_queue, cohort, local_queue, tenant_account, api_key, admin_key or agent")
	f.StringVar(&req.Action, "action", "", "an action (task.created) or, with --resource, its verb (created)")
	f.StringVar(&req.ResourceId, "resource-id", "", "one resource's entries")
	f.StringVar(&req.UserId, "user", "", "one user's (API key, agent, operator) entries")
	f.StringVar(&req.From, "from", "", "from this day (YYYY-MM-DD) or time (RFC 3339), inclusive")
	f.StringVar(&req.To, "to", "", "to this day (YYYY-MM-DD) or time (RFC 3339), inclusive")
	f.StringVar(&req.TenantId, "tenant", "", "with --operator: one tenant's entries")
	f.IntVar(&limit, "limit", 100, "entries per page")
	f.BoolVar(&all, "all", false, "list every page")
	f.BoolVar(&op, "operator", false, "use the operator key: every tenant's entries")
	f.BoolVar(&verbosity, "details", false, "show each entry's details")
	return cmd
}

func writeAudit(w io.Writer, r *auditv1.ListAuditLogsResponse, details bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "TIME\tACTION\tRESOURCE_ID\tTENANT\tUSER\tMACHINE\tIP"
	if details {
		header += "\tDETAILS"
	}
	fmt.Fprintln(tw, header)
	for _, e := range r.GetAuditLogs() {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", timeText(e.GetTimestamp()), e.GetAction(), e.GetResourceId(), e.GetTenantId(),
			e.GetUserId(), e.GetMachineId(), e.GetIp())
		if details {
			line += "\t" + e.GetDetails()
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}
