package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// The templates commands call TemplateService (docs/api/templates.md) as a
// tenant.

func (a *app) templatesCommand() *cobra.Command {
	templates := &cobra.Command{
		Use:     "templates",
		Aliases: []string{"template"},
		Short:   "Create, list, inspect, update, delete and run task templates",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	templates.AddCommand(a.templateCreateCommand(), a.templateListCommand(), a.templateGetCommand(),
		a.templateUpdateCommand(), a.templateDeleteCommand(), a.templateRunCommand())
	return templates
}

// readTemplateFile reads a template file (templatefile.go; "-" is
// standard input).
func readTemplateFile(cmd *cobra.Command, name string) (*taskv1.TaskTemplate, error) {
	var data []byte
	var err error
	if name == "-" {
		name = "<stdin>"
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("read template file: %w", err)
	}
	return ParseTemplateFile(name, data)
}

func (a *app) templateCreateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a template from a template file (-f - reads stdin)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf(cmd, "no template file given (-f FILE)")
			}
			t, err := readTemplateFile(cmd, file)
			if err != nil {
				return err
			}
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.templates.CreateTemplate(ctx, &taskv1.CreateTemplateRequest{Template: t})
				tpl := resp.GetTemplate()
				return tpl, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s created\n", tpl.GetId()); return err }, err
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "template file")
	return cmd
}

func (a *app) templateUpdateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "update ID -f FILE",
		Short: "Replace a template's definition with a template file",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageErrorf(cmd, "no template file given (-f FILE)")
			}
			t, err := readTemplateFile(cmd, file)
			if err != nil {
				return err
			}
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.templates.UpdateTemplate(ctx, &taskv1.UpdateTemplateRequest{Id: args[0], Template: t})
				tpl := resp.GetTemplate()
				return tpl, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s updated\n", tpl.GetId()); return err }, err
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "template file")
	return cmd
}

func (a *app) templateListCommand() *cobra.Command {
	var category string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List templates by id",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				templates, _, err := collectPages(true, func(token string) ([]*taskv1.TaskTemplate, string, error) {
					page, err := c.templates.ListTemplates(ctx, &taskv1.ListTemplatesRequest{Category: category, PageSize: maxPageSize, PageToken: token})
					return page.GetTemplates(), page.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				resp := &taskv1.ListTemplatesResponse{Templates: templates}
				return resp, func(w io.Writer) error {
					tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tNAME\tCATEGORY\tVARIABLES")
					for _, t := range resp.GetTemplates() {
						var vars []string
						for _, v := range t.GetVariables() {
							vars = append(vars, v.GetName())
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.GetId(), t.GetName(), orDash(t.GetCategory()), strings.Join(vars, ", "))
					}
					return tw.Flush()
				}, nil
			})
		},
	}
	cmd.Flags().StringVar(&category, "category", "", "only templates of this category")
	return cmd
}

func (a *app) templateGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a template (-o json|yaml for all of it)",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.templates.GetTemplate(ctx, &taskv1.GetTemplateRequest{Id: args[0]})
				t := resp.GetTemplate()
				return t, func(w io.Writer) error { return describeTemplate(w, t) }, err
			})
		},
	}
}

func describeTemplate(out io.Writer, t *taskv1.TaskTemplate) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ID", t.GetId())
	row("Name", t.GetName())
	row("Description", t.GetDescription())
	cmdline := []string{quoteArg(t.GetCommand())}
	for _, a := range t.GetArgs() {
		cmdline = append(cmdline, quoteArg(a))
	}
	row("Command", strings.Join(cmdline, " "))
	row("Workdir", t.GetWorkdir())
	row("Category", t.GetCategory())
	row("Tags", strings.Join(t.GetTags(), ", "))
	for _, v := range t.GetVariables() {
		desc := v.GetType()
		if v.GetRequired() {
			desc += ", required"
		}
		if v.GetDefault() != "" {
			desc += ", default " + quoteArg(v.GetDefault())
		}
		if len(v.GetOptions()) > 0 {
			desc += ", one of " + strings.Join(v.GetOptions(), "|")
		}
		if v.GetDescription() != "" {
			desc += ": " + v.GetDescription()
		}
		row("Variable "+v.GetName(), desc)
	}
	row("Created", fmt.Sprintf("%s by %s", timeText(t.GetCreatedAt()), t.GetCreatedBy()))
	return tw.Flush()
}

func (a *app) templateDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a template",
		Args:  idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.templates.DeleteTemplate(ctx, &taskv1.DeleteTemplateRequest{Id: args[0]})
				return resp, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s deleted\n", args[0]); return err }, err
			})
		},
	}
}

func (a *app) templateRunCommand() *cobra.Command {
	var vars, machines []string
	var priority int
	var wait bool
	cmd := &cobra.Command{
		Use:   "run ID [--var NAME=VALUE]…",
		Short: "Create a task from a template with variable values",
		Long: `Create a task from a template. Each --var NAME=VALUE gives a variable's
value as text; the server checks it against the variable's type (an int
must be a whole number, a bool true or false, a select one of its options)
and puts it into its argument as it is: never split, never given to a
shell. --machine fans the run out, one task per machine.`,
		Args: idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := a.format(cmd)
			if err != nil {
				return err
			}
			req := &taskv1.RunTemplateRequest{Id: args[0], Variables: map[string]*structpb.Value{}}
			for _, v := range vars {
				k, val, ok := strings.Cut(v, "=")
				if !ok || k == "" {
					return usageErrorf(cmd, "--var %q: want NAME=VALUE", v)
				}
				if _, dup := req.Variables[k]; dup {
					return usageErrorf(cmd, "--var %s given twice", k)
				}
				req.Variables[k] = structpb.NewStringValue(val)
			}
			if cmd.Flags().Changed("priority") {
				if priority < 1 || priority > 10 {
					return usageErrorf(cmd, "--priority %d: want 1 (highest) to 10", priority)
				}
				p := int32(priority)
				req.Priority = &p
			}
			if len(machines) > 0 {
				req.Targets = &taskv1.Targets{MachineIds: machines}
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := a.call(cmd.Context())
			resp, err := c.templates.RunTemplate(ctx, req)
			cancel()
			if err != nil {
				return err
			}
			if format != formatTable && wait {
				// One line (document) before the watch's, as submit --wait.
				if err := writeProtoLine(cmd.OutOrStdout(), format, resp); err != nil {
					return err
				}
			} else if format != formatTable {
				if err := writeProto(cmd.OutOrStdout(), format, resp); err != nil {
					return err
				}
			} else {
				for _, id := range resp.GetTaskIds() {
					fmt.Fprintln(cmd.OutOrStdout(), id)
				}
			}
			if !wait {
				return nil
			}
			return a.waitAll(cmd, c, resp.GetTaskIds(), format)
		},
	}
	cmd.Flags().StringArrayVar(&vars, "var", nil, "a variable's value, NAME=VALUE (repeatable)")
	cmd.Flags().IntVar(&priority, "priority", 0, "override the template's priority (1 highest … 10)")
	cmd.Flags().StringSliceVar(&machines, "machine", nil, "one task per machine id (repeatable)")
	cmd.Flags().BoolVar(&wait, "wait", false, "watch the task(s) until they end")
	return cmd
}
