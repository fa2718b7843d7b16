package ctl

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) suspendCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "suspend ID",
		Short: "Pause a task: a pending one is held, a running one stops (a cooperative one saves its checkpoint first); its quota is freed",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.tasks.SuspendTask(ctx, &taskv1.SuspendTaskRequest{Id: args[0], Reason: reason})
				return resp.GetTask(), statusLine(resp.GetTask()), err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the suspension")
	return cmd
}

func (a *app) resumeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Put a suspended task back in the queue; it runs again from its last checkpoint",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.tasks.ResumeTask(ctx, &taskv1.ResumeTaskRequest{Id: args[0]})
				return resp.GetTask(), statusLine(resp.GetTask()), err
			})
		},
	}
}
