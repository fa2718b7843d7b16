package ctl

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) getCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one task (-o json|yaml for the whole task)",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.tasks.GetTask(ctx, &taskv1.GetTaskRequest{Id: args[0]})
				t := resp.GetTask()
				return t, func(w io.Writer) error { return describeTask(w, t) }, err
			})
		},
	}
}

// describeTask prints the fields a person looks at, skipping empty ones.
func describeTask(out io.Writer, t *taskv1.Task) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ID", t.GetId())
	row("Name", t.GetName())
	row("Type", t.GetType())
	status := t.GetStatus()
	if a := t.GetAttemptId(); a != "" {
		status += " (attempt " + a
		if ag := t.GetAssignedAgentId(); ag != "" {
			status += ", agent " + ag
		}
		status += ")"
	}
	row("Status", status)
	if t.GetProgress() != 0 || t.GetProgressMessage() != "" {
		row("Progress", strings.TrimSpace(fmt.Sprintf("%d%% %s", t.GetProgress(), t.GetProgressMessage())))
	}
	cmdline := make([]string, 0, 1+len(t.GetArgs()))
	if t.GetCommand() != "" {
		cmdline = append(cmdline, quoteArg(t.GetCommand()))
	}
	for _, arg := range t.GetArgs() {
		cmdline = append(cmdline, quoteArg(arg))
	}
	row("Command", strings.Join(cmdline, " "))
	row("Workdir", t.GetWorkdir())
	env := make([]string, 0, len(t.GetEnv()))
	for _, k := range slices.Sorted(maps.Keys(t.GetEnv())) {
		env = append(env, k+"="+quoteArg(t.GetEnv()[k]))
	}
	row("Env", strings.Join(env, " "))
	row("Priority", fmt.Sprint(t.GetPriority()))
	row("Timeout", fmt.Sprintf("%ds", t.GetTimeout()))
	row("Retries", fmt.Sprintf("%d of %d (delay %ds)", t.GetRetryCount(), t.GetMaxRetries(), t.GetRetryDelay()))
	row("Retry at", timeText(t.GetRetryAt()))
	row("Machine", t.GetMachineId())
	// Single placement is already shown as Machine; show the others.
	if d := t.GetDistribution(); d != nil && ((d.GetMode() != "single" && d.GetMode() != "") || len(d.GetLabels()) > 0) {
		dist := d.GetMode()
		if len(d.GetLabels()) > 0 {
			dist += " labels=" + strings.Join(d.GetLabels(), ",")
		}
		if d.GetCount() > 0 {
			dist += fmt.Sprintf(" count=%d", d.GetCount())
		}
		row("Distribution", dist)
	}
	row("Queue", t.GetQueue())
	row("Group", t.GetGroupId())
	row("Parent", t.GetParentId())
	row("Depends on", strings.Join(t.GetDependsOn(), ", "))
	row("Lease", fmt.Sprintf("ttl %ds, renew every %ds, heartbeat every %ds, grace %ds",
		t.GetLeaseTtlSec(), t.GetRenewIntervalSec(), t.GetHeartbeatIntervalSec(), t.GetGracePeriodSec()))
	row("Lease expires", timeText(t.GetLeaseExpiresAt()))
	row("Last heartbeat", timeText(t.GetLastHeartbeatAt()))
	row("Created", timeText(t.GetCreatedAt()))
	row("Assigned", timeText(t.GetAssignedAt()))
	row("Started", timeText(t.GetStartedAt()))
	row("Ended", timeText(t.GetEndedAt()))
	if t.ExitCode != nil {
		row("Exit code", fmt.Sprint(t.GetExitCode()))
	}
	row("Error", t.GetError())
	return tw.Flush()
}
