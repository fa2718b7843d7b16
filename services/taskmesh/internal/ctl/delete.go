package ctl

import (
	"fmt"

	"github.com/spf13/cobra"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) deleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a task that is not assigned or running",
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
			resp, err := c.tasks.DeleteTask(ctx, &taskv1.DeleteTaskRequest{Id: args[0]})
			if err != nil {
				return err
			}
			if format != formatTable {
				return writeProto(cmd.OutOrStdout(), format, resp)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s deleted\n", resp.GetId())
			return err
		},
	}
}
