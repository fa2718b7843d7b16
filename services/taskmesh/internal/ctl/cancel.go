package ctl

import (
	"context"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"io"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) cancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task that is not final (a running process gets SIGTERM, then SIGKILL after the grace period)",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.tasks.CancelTask(ctx, &taskv1.CancelTaskRequest{Id: args[0], Reason: reason})
				return resp.GetTask(), statusLine(resp.GetTask()), err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the cancellation")
	return cmd
}
