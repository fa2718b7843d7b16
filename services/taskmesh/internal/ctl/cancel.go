package ctl

import (
	"github.com/spf13/cobra"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) cancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task that is not final (a running process gets SIGTERM, then SIGKILL after the grace period)",
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
			resp, err := c.tasks.CancelTask(ctx, &taskv1.CancelTaskRequest{Id: args[0], Reason: reason})
			if err != nil {
				return err
			}
			return writeTaskStatus(cmd.OutOrStdout(), format, resp.GetTask())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the cancellation")
	return cmd
}
