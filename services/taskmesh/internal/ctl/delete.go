package ctl

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) deleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a task (an assigned or running one is cancelled first)",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.tasks.DeleteTask(ctx, &taskv1.DeleteTaskRequest{Id: args[0]})
				return resp, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "%s deleted\n", resp.GetId())
					return err
				}, err
			})
		},
	}
}
