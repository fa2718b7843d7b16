package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

// queuesCommand groups the admission queues' commands (the quota
// service's AdmissionService through the gateway's front door).
func (a *app) queuesCommand() *cobra.Command {
	queues := &cobra.Command{
		Use:     "queues",
		Aliases: []string{"queue"},
		Short:   "Show the admission queues (ClusterQueues) with their live usage",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the ClusterQueues: cohort, pending and admitted work, usage per resource",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admission.ListClusterQueues(ctx, &quotav1.ListClusterQueuesRequest{})
				return resp, func(w io.Writer) error { return writeQueues(w, resp.GetClusterQueues()) }, err
			})
		},
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one ClusterQueue",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admission.GetClusterQueue(ctx, &quotav1.GetClusterQueueRequest{Name: args[0]})
				return resp, func(w io.Writer) error {
					return writeQueues(w, []*quotav1.ClusterQueue{resp.GetClusterQueue()})
				}, err
			})
		},
	}
	queues.AddCommand(list, get)
	return queues
}

// writeQueues prints a line per queue and resource (flavor).
func writeQueues(w io.Writer, qs []*quotav1.ClusterQueue) error {
	return table(w, "NAME\tCOHORT\tPENDING\tADMITTED\tRESOURCE\tUSED/NOMINAL\tBORROWED\tAVAILABLE", func(tw io.Writer) {
		for _, q := range qs {
			head := fmt.Sprintf("%s\t%s\t%d\t%d", q.GetName(), q.GetSpec().GetCohort(), q.GetPendingWorkloads(), q.GetAdmittedWorkloads())
			n := 0
			for _, f := range q.GetFlavorsUsage() {
				for _, r := range f.GetResources() {
					fmt.Fprintf(tw, "%s\t%s (%s)\t%s/%s\t%s\t%s\n", head, r.GetName(), f.GetName(),
						r.GetTotal(), r.GetNominalQuota(), r.GetBorrowed(), r.GetAvailable())
					head, n = "\t\t\t", n+1
				}
			}
			if n == 0 {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\n", head)
			}
		}
	})
}

// whyCommand explains a task's admission: where it waits and what blocks it.
func (a *app) whyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "why ID",
		Short: "Say why a task waits for admission (its queue, position, and the resources it lacks)",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admission.ExplainTaskAdmission(ctx, &quotav1.ExplainTaskAdmissionRequest{TaskId: args[0]})
				return resp, func(w io.Writer) error { return writeExplanation(w, resp) }, err
			})
		},
	}
}

func writeExplanation(w io.Writer, e *quotav1.ExplainTaskAdmissionResponse) error {
	rows := [][2]string{{"task_id", e.GetTaskId()}, {"queue", e.GetClusterQueue()}, {"state", e.GetState()}}
	if e.GetPosition() > 0 {
		rows = append(rows, [2]string{"position", fmt.Sprint(e.GetPosition())})
	}
	rows = append(rows, [2]string{"reason", e.GetReason()})
	for _, s := range e.GetShortages() {
		rows = append(rows, [2]string{"short", fmt.Sprintf("%s (%s): requested %s, available %s, nominal %s",
			s.GetResource(), s.GetFlavor(), s.GetRequested(), s.GetAvailable(), s.GetNominalQuota())})
	}
	if b := e.GetBlockedBy(); b != "" {
		rows = append(rows, [2]string{"blocked_by", b})
	}
	if v := e.GetWaitingFor(); len(v) > 0 {
		rows = append(rows, [2]string{"waiting_for", strings.Join(v, ", ")})
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%-12s %s\n", r[0]+":", r[1]); err != nil {
			return err
		}
	}
	return nil
}
