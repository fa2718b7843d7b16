package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
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
		Args:  idArgsOf("queue"),
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

// whyCommand explains why a task waits: its admission (queue, position,
// the resources it lacks) and, once admitted and leased, what the
// executor says, such as Slurm's pending reason.
func (a *app) whyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "why ID",
		Short: "Say why a task waits: its admission (queue, position, resources it lacks) and the executor's reason (e.g. Slurm's)",
		Args:  idArgsOf("queue"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				// The task's own record says what the executor reported; a
				// failure to read it leaves the admission's answer alone.
				var task *taskv1.Task
				if got, err := c.tasks.GetTask(ctx, &taskv1.GetTaskRequest{Id: args[0]}); err == nil {
					task = got.GetTask()
				}
				resp, err := c.admission.ExplainTaskAdmission(ctx, &quotav1.ExplainTaskAdmissionRequest{TaskId: args[0]})
				if status.Code(err) == codes.NotFound && task != nil {
					resp, err = unknownToAdmission(task), nil
				}
				if err != nil {
					return nil, nil, err
				}
				return resp, func(w io.Writer) error { return writeExplanation(w, resp, task) }, nil
			})
		},
	}
}

// unknownToAdmission explains a task the admission layer does not know:
// one held out of its ClusterQueue until its dependencies complete (its
// stay begins then: docs/api/quota.md, "Which work waits and where"), or
// work without resources or a queue, which never waits for admission (the
// executor may still explain a wait).
func unknownToAdmission(task *taskv1.Task) *quotav1.ExplainTaskAdmissionResponse {
	if task.GetHeldForDependencies() {
		return &quotav1.ExplainTaskAdmissionResponse{TaskId: task.GetId(), ClusterQueue: task.GetClusterQueue(), State: "held",
			Reason: "held out of its ClusterQueue until its dependencies complete: " + strings.Join(task.GetDependsOn(), ", ")}
	}
	return &quotav1.ExplainTaskAdmissionResponse{TaskId: task.GetId(), State: "none", Reason: "the task needs no admission"}
}

// slurmPrefix starts the progress messages of the Slurm backend
// (docs/slurm.md#states): "slurm: job 12 PENDING (Resources)".
const slurmPrefix = "slurm: "

// executorReason is what a task that is leased but not running waits for,
// as its executor last said: Slurm's state and reason, or another
// executor's progress message.
func executorReason(t *taskv1.Task) (key, reason string) {
	msg := t.GetProgressMessage()
	if msg == "" || t.GetStatus() != "assigned" {
		return "", ""
	}
	if rest, ok := strings.CutPrefix(msg, slurmPrefix); ok {
		return "slurm", rest
	}
	return "executor", msg
}

func writeExplanation(w io.Writer, e *quotav1.ExplainTaskAdmissionResponse, task *taskv1.Task) error {
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
	if task != nil {
		if key, reason := executorReason(task); key != "" {
			rows = append(rows, [2]string{"status", task.GetStatus() + " to " + task.GetAssignedAgentId()}, [2]string{key, reason})
		}
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%-12s %s\n", r[0]+":", r[1]); err != nil {
			return err
		}
	}
	return nil
}
