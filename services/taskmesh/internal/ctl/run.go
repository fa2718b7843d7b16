package ctl

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
)

// taskCall runs the usual shape of a subcommand: parse the output format,
// connect, make one call under the request timeout, print its answer.
// call returns what to print: write (for the table format) or msg (for
// json and yaml).
func (a *app) taskCall(cmd *cobra.Command, call func(ctx context.Context, c *conn) (msg proto.Message, write func(io.Writer) error, err error)) error {
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
	msg, write, err := call(ctx, c)
	if err != nil {
		return err
	}
	if format != formatTable {
		return writeProto(cmd.OutOrStdout(), format, msg)
	}
	return write(cmd.OutOrStdout())
}
