package ctl

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) retryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Put a failed or cancelled task back to pending",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := a.format(cmd)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := c.tasks.RetryTask(ctx, &taskv1.RetryTaskRequest{Id: args[0]})
			if err != nil {
				return err
			}
			return writeTaskStatus(cmd.OutOrStdout(), format, resp.GetTask())
		},
	}
}

// writeTaskStatus is the answer of cancel and retry: "<id> <status>", or
// the whole task with -o json|yaml.
func writeTaskStatus(out io.Writer, format string, t *taskv1.Task) error {
	if format != formatTable {
		return writeProto(out, format, t)
	}
	_, err := fmt.Fprintf(out, "%s %s\n", t.GetId(), t.GetStatus())
	return err
}
