package ctl

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) retryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Put a failed or cancelled task back to pending",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.tasks.RetryTask(ctx, &taskv1.RetryTaskRequest{Id: args[0]})
				return resp.GetTask(), statusLine(resp.GetTask()), err
			})
		},
	}
}

// statusLine is the answer of cancel and retry in the table format:
// "<id> <status>".
func statusLine(t *taskv1.Task) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s %s\n", t.GetId(), t.GetStatus())
		return err
	}
}
