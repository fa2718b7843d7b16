package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
)

// The deadletters commands call the dead-letter API with the operator key.

func (a *app) deadLettersCommand() *cobra.Command {
	dl := &cobra.Command{
		Use:     "deadletters",
		Aliases: []string{"dead-letters", "deadletter"},
		Short:   "List, retry and drop the records projections and consumers parked (operator key)",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	dl.AddCommand(a.deadLetterListCommand(), a.deadLetterRetryCommand(), a.deadLetterDropCommand())
	return dl
}

// deadLetterRef reads SERVICE/ID, e.g. consumers/12.
func deadLetterRef(s string) (service string, id int64, err error) {
	service, num, ok := strings.Cut(s, "/")
	id, perr := strconv.ParseInt(num, 10, 64)
	if !ok || perr != nil || id <= 0 || service == "" {
		return "", 0, fmt.Errorf("%q: want SERVICE/ID, e.g. consumers/12 (as ctl deadletters list shows)", s)
	}
	return service, id, nil
}

var deadLetterArgs = usageArgs(func(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return errors.New("want one dead letter, SERVICE/ID")
	}
	_, _, err := deadLetterRef(args[0])
	return err
})

func (a *app) deadLetterListCommand() *cobra.Command {
	var (
		req   deadletterv1.ListDeadLettersRequest
		limit int
		all   bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List parked records, oldest first per service",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf(cmd, "--limit %d: want 1 to 1000", limit)
			}
			req.PageSize = int32(limit)
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				parked, next, err := collectPages(all, func(token string) ([]*deadletterv1.DeadLetter, string, error) {
					req.PageToken = token
					resp, err := c.deadLetters.ListDeadLetters(ctx, &req)
					return resp.GetDeadLetters(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				out := &deadletterv1.ListDeadLettersResponse{DeadLetters: parked, NextPageToken: next}
				return out, func(w io.Writer) error {
					if err := writeDeadLetters(w, out); err != nil {
						return err
					}
					return writeMore(cmd.ErrOrStderr(), next, "dead letters")
				}, nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Service, "service", "", "scheduler, quota or consumers (default: all)")
	f.StringVar(&req.Projection, "projection", "", "one projection's (e.g. usage, task_read_models)")
	f.IntVar(&limit, "limit", 100, "dead letters per page")
	f.BoolVar(&all, "all", false, "list every page")
	return cmd
}

func writeDeadLetters(w io.Writer, r *deadletterv1.ListDeadLettersResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROJECTION\tRECORD\tEVENT\tPARKED\tATTEMPTS\tERROR")
	for _, d := range r.GetDeadLetters() {
		fmt.Fprintf(tw, "%s/%d\t%s\t%s[%d]@%d\t%s %s\t%s\t%d\t%s\n", d.GetService(), d.GetId(), d.GetProjection(), d.GetTopic(),
			d.GetPartition(), d.GetOffset(), d.GetEventType(), d.GetEventId(), timeText(d.GetParkedAt()), d.GetAttempts(), d.GetError())
	}
	return tw.Flush()
}

func (a *app) deadLetterRetryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "retry SERVICE/ID",
		Short: "Apply a parked record again (after a fix) and say whether it applied",
		Args:  deadLetterArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			service, id, _ := deadLetterRef(args[0])
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.deadLetters.RetryDeadLetter(ctx, &deadletterv1.RetryDeadLetterRequest{Service: service, Id: id})
				return resp, func(w io.Writer) error {
					switch resp.GetOutcome() {
					case "applied":
						_, err := fmt.Fprintf(w, "%s applied; it is no longer a dead letter\n", args[0])
						return err
					case "failed":
						_, err := fmt.Fprintf(w, "%s failed again: %s\n", args[0], resp.GetDeadLetter().GetError())
						return err
					}
					_, err := fmt.Fprintf(w, "%s: retry requested; its consumer has not run it yet (is the %s service running?)\n", args[0], service)
					return err
				}, err
			})
		},
	}
}

func (a *app) deadLetterDropCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "drop SERVICE/ID",
		Short: "Remove a parked record for good (its projection stays without it)",
		Args:  deadLetterArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			service, id, _ := deadLetterRef(args[0])
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.deadLetters.DropDeadLetter(ctx, &deadletterv1.DropDeadLetterRequest{Service: service, Id: id})
				return resp, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s dropped\n", args[0]); return err }, err
			})
		},
	}
}
