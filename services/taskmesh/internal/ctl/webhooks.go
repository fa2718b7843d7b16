package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
)

func (a *app) webhooksCommand() *cobra.Command {
	hooks := &cobra.Command{
		Use:     "webhooks",
		Aliases: []string{"webhook"},
		Short:   "The tenant's webhook endpoint and secret, and the deliveries made",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	endpoint := &cobra.Command{
		Use:   "endpoint",
		Short: "Show, set or clear the tenant's default endpoint, or rotate its secret (API key)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	endpoint.AddCommand(a.endpointGetCommand(), a.endpointSetCommand(), a.endpointRotateCommand())
	hooks.AddCommand(endpoint, a.deliveriesCommand(), a.deliveryGetCommand(), a.redeliverCommand())
	return hooks
}

func writeEndpoint(w io.Writer, e *webhookv1.WebhookEndpoint, secret string) error {
	url := e.GetUrl()
	if url == "" {
		url = "(none)"
	}
	fmt.Fprintf(w, "url:     %s\nsecret:  %v (created %s)\n", url, e.GetHasSecret(), timeText(e.GetSecretCreatedAt()))
	if secret != "" {
		_, err := fmt.Fprintf(w, "\n%s\n\nThe secret is shown once: keep it to verify webhook-signature (Standard Webhooks).\n", secret)
		return err
	}
	return nil
}

func (a *app) endpointGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Show the default endpoint",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.webhooks.GetWebhookEndpoint(ctx, &webhookv1.GetWebhookEndpointRequest{})
				return resp.GetEndpoint(), func(w io.Writer) error { return writeEndpoint(w, resp.GetEndpoint(), "") }, err
			})
		},
	}
}

func (a *app) endpointSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set URL",
		Short: `Set the default endpoint ("" clears it); the first call prints the signing secret, once`,
		Args: usageArgs(func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("want one URL (\"\" to clear)")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.webhooks.SetWebhookEndpoint(ctx, &webhookv1.SetWebhookEndpointRequest{Url: args[0]})
				return resp, func(w io.Writer) error { return writeEndpoint(w, resp.GetEndpoint(), resp.GetSecret()) }, err
			})
		},
	}
}

func (a *app) endpointRotateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-secret",
		Short: "Replace the signing secret and print the new one, once",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.webhooks.RotateWebhookSecret(ctx, &webhookv1.RotateWebhookSecretRequest{})
				return resp, func(w io.Writer) error { return writeEndpoint(w, resp.GetEndpoint(), resp.GetSecret()) }, err
			})
		},
	}
}

func (a *app) deliveriesCommand() *cobra.Command {
	var (
		req     webhookv1.ListWebhookDeliveriesRequest
		limit   int
		all, op bool
	)
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "List deliveries, newest first (the tenant's with an API key, every tenant's with --operator)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch req.GetState() {
			case "", "pending", "delivered", "dead":
			default:
				return usageErrorf(cmd, "--state %s: want pending, delivered or dead", req.GetState())
			}
			if limit < 1 || limit > 1000 {
				return usageErrorf(cmd, "--limit %d: want 1 to 1000", limit)
			}
			if req.GetTenantId() != "" && !op {
				return usageErrorf(cmd, "--tenant needs --operator")
			}
			req.PageSize = int32(limit)
			return a.consumerCall(cmd, op, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				deliveries, next, err := collectPages(all, func(token string) ([]*webhookv1.WebhookDelivery, string, error) {
					req.PageToken = token
					resp, err := c.webhooks.ListWebhookDeliveries(ctx, &req)
					return resp.GetDeliveries(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				out := &webhookv1.ListWebhookDeliveriesResponse{Deliveries: deliveries, NextPageToken: next}
				return out, func(w io.Writer) error {
					if err := writeDeliveries(w, out); err != nil {
						return err
					}
					return writeMore(cmd.ErrOrStderr(), next, "deliveries")
				}, nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.State, "state", "", "pending, delivered or dead (default: all)")
	f.StringVar(&req.TaskId, "task", "", "one task's deliveries")
	f.StringVar(&req.TenantId, "tenant", "", "with --operator: one tenant's deliveries")
	f.IntVar(&limit, "limit", 100, "deliveries per page")
	f.BoolVar(&all, "all", false, "list every page")
	f.BoolVar(&op, "operator", false, "use the operator key: every tenant's deliveries")
	return cmd
}

func writeDeliveries(w io.Writer, r *webhookv1.ListWebhookDeliveriesResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTASK\tSTATUS\tSTATE\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, d := range r.GetDeliveries() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.GetId(), d.GetTaskId(), d.GetStatus(), d.GetState(), d.GetAttempts(),
			timeText(d.GetCreatedAt()), d.GetLastError())
	}
	return tw.Flush()
}

var deliveryArgs = usageArgs(func(_ *cobra.Command, args []string) error {
	if len(args) != 1 || args[0] == "" {
		return errors.New("want one delivery id (msg_…)")
	}
	return nil
})

func (a *app) deliveryGetCommand() *cobra.Command {
	var op bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show a delivery and every attempt",
		Args:  deliveryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.consumerCall(cmd, op, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.webhooks.GetWebhookDelivery(ctx, &webhookv1.GetWebhookDeliveryRequest{DeliveryId: args[0]})
				return resp.GetDelivery(), func(w io.Writer) error { return writeDelivery(w, resp.GetDelivery()) }, err
			})
		},
	}
	cmd.Flags().BoolVar(&op, "operator", false, "use the operator key: any tenant's delivery")
	return cmd
}

func writeDelivery(w io.Writer, d *webhookv1.WebhookDelivery) error {
	fmt.Fprintf(w, "id:        %s\ntask:      %s (%s)\nurl:       %s\nbody:      %s\nstate:     %s after %d attempts\n",
		d.GetId(), d.GetTaskId(), d.GetStatus(), orDefault(d.GetUrl(), "(the tenant's default endpoint)"), d.GetBody(), d.GetState(), d.GetAttempts())
	if d.GetLastError() != "" {
		fmt.Fprintf(w, "error:     %s\n", d.GetLastError())
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\n#\tAT\tHTTP\tMS\tURL\tERROR")
	for _, a := range d.GetAttemptLog() {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\n", a.GetNumber(), timeText(a.GetAt()), a.GetHttpStatus(), a.GetDurationMs(), a.GetUrl(), a.GetError())
	}
	return tw.Flush()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (a *app) redeliverCommand() *cobra.Command {
	var op bool
	cmd := &cobra.Command{
		Use:   "redeliver ID",
		Short: "Send a delivery again now, with another 24 hours of retries",
		Args:  deliveryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.consumerCall(cmd, op, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.webhooks.RedeliverWebhook(ctx, &webhookv1.RedeliverWebhookRequest{DeliveryId: args[0]})
				return resp.GetDelivery(), func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "%s queued again\n", args[0])
					return err
				}, err
			})
		},
	}
	cmd.Flags().BoolVar(&op, "operator", false, "use the operator key: any tenant's delivery")
	return cmd
}
