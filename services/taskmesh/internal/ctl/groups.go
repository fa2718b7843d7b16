package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// The groups commands call TaskGroupService (docs/api/task-groups.md) as a
// tenant, except reset, which needs the operator key.

func (a *app) groupsCommand() *cobra.Command {
	groups := &cobra.Command{
		Use:     "groups",
		Aliases: []string{"group"},
		Short:   "Submit, inspect, watch, start, cancel, delete and reset task groups",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	groups.AddCommand(a.groupSubmitCommand(), a.groupListCommand(), a.groupGetCommand(), a.groupWatchCommand(),
		a.groupChangeCommand("start", "Start a group created with start: false"),
		a.groupChangeCommand("cancel", "Cancel a group: pending members are cancelled, running ones stopped"),
		a.groupDeleteCommand(), a.groupResetCommand())
	return groups
}

func (a *app) groupSubmitCommand() *cobra.Command {
	var files []string
	var wait bool
	cmd := &cobra.Command{
		Use:   "submit -f FILE…",
		Short: "Create task groups from group files (group: or repeat:); -f - reads stdin",
		Long: `Create the task groups of group files: group: {mode: serial|parallel|dag,
tasks: […]} or repeat: {count, parallel, interval_sec, max_failures,
backoff_sec, circuit_breaker_threshold, template: {…}}, one per YAML
document (docs/ctl.md, "Group files"). Every group is checked by the server
before anything is stored. With --wait each group is watched until it
ends.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := a.format(cmd)
			if err != nil {
				return err
			}
			if len(files) == 0 {
				return usageErrorf(cmd, "no group file given (-f FILE, or -f - for standard input)")
			}
			groups, err := a.readGroupFiles(cmd, files)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			var created []*taskv1.TaskGroup
			for _, g := range groups {
				// What a file submits runs: a group waits for `groups
				// start` only when its file says start: false.
				if g.Request.Start == nil {
					g.Request.Start = proto.Bool(true)
				}
				ctx, cancel := a.call(cmd.Context())
				resp, err := c.groups.CreateTaskGroup(ctx, g.Request)
				cancel()
				if err != nil {
					// Groups of earlier documents stay created: name them,
					// as a rerun creates them again unless they have a
					// request_id.
					var done string
					if len(created) > 0 {
						var parts []string
						for i, c := range created {
							parts = append(parts, fmt.Sprintf("%s (%s)", c.GetId(), groups[i].Where))
						}
						done = "submitted before it: " + strings.Join(parts, ", ")
					}
					return &opError{Op: "group at " + g.Where, Err: err, Done: done}
				}
				created = append(created, resp.GetGroup())
				if format == formatTable {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s group %q: %s, %s\n", resp.GetGroup().GetId(),
						resp.GetGroup().GetMode(), resp.GetGroup().GetName(), counted(int(resp.GetGroup().GetTotal()), "task"), resp.GetGroup().GetStatus())
				} else if err := writeCreatedGroup(cmd.OutOrStdout(), format, resp.GetGroup(), wait || len(groups) > 1); err != nil {
					return err
				}
			}
			if !wait {
				return nil
			}
			var ended error
			for _, g := range created {
				w := a.newGroupWatcher(cmd, c, format)
				w.connected = true // the group was just created
				if _, err := w.run(cmd.Context(), g.GetId()); err != nil {
					var te *TaskEndedError
					if !errors.As(err, &te) {
						return err
					}
					ended = errors.Join(ended, err)
				}
			}
			return ended
		},
	}
	cmd.Flags().StringSliceVarP(&files, "file", "f", nil, "group file (repeatable; - for standard input)")
	cmd.Flags().BoolVar(&wait, "wait", false, "watch each group until it ends (exit 1 if one fails or is cancelled)")
	return cmd
}

func (a *app) readGroupFiles(cmd *cobra.Command, files []string) ([]FileGroup, error) {
	var all []FileGroup
	stdin := false
	for _, name := range files {
		var data []byte
		var err error
		display := name
		if name == "-" {
			if stdin {
				return nil, usageErrorf(cmd, "-f - given twice: standard input can be read once")
			}
			stdin, display = true, "<stdin>"
			data, err = io.ReadAll(cmd.InOrStdin())
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("read group file: %w", err)
		}
		groups, err := ParseGroupFile(display, data)
		if err != nil {
			return nil, err
		}
		all = append(all, groups...)
	}
	return all, nil
}

// groupStatuses and groupModes are what ListTaskGroups filters on.
var (
	groupStatuses = []string{"pending", "running", "completed", "failed", "cancelled"}
	groupModes    = []string{"serial", "parallel", "dag", "repeat"}
)

func (a *app) groupListCommand() *cobra.Command {
	var status, mode string
	var limit int
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List task groups, newest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case status != "" && !slices.Contains(groupStatuses, status):
				return usageErrorf(cmd, "--status %s: want one of %s", status, strings.Join(groupStatuses, ", "))
			case mode != "" && !slices.Contains(groupModes, mode):
				return usageErrorf(cmd, "--mode %s: want one of %s", mode, strings.Join(groupModes, ", "))
			case limit < 1 || limit > maxPageSize:
				return usageErrorf(cmd, "--limit %d: want 1 to %d", limit, maxPageSize)
			}
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				groups, next, err := collectPages(all, func(token string) ([]*taskv1.TaskGroup, string, error) {
					page, err := c.groups.ListTaskGroups(ctx, &taskv1.ListTaskGroupsRequest{Status: status, Mode: mode, PageSize: int32(limit), PageToken: token})
					return page.GetGroups(), page.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				resp := &taskv1.ListTaskGroupsResponse{Groups: groups, NextPageToken: next}
				return resp, func(w io.Writer) error {
					if err := writeGroupTable(w, groups); err != nil {
						return err
					}
					return writeMore(cmd.ErrOrStderr(), next, "groups")
				}, nil
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only groups with this status")
	cmd.Flags().StringVar(&mode, "mode", "", "only groups of this mode")
	cmd.Flags().IntVar(&limit, "limit", 50, "page size")
	cmd.Flags().BoolVar(&all, "all", false, "every page")
	return cmd
}

func writeGroupTable(out io.Writer, groups []*taskv1.TaskGroup) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tMODE\tSTATUS\tDONE\tCREATED")
	for _, g := range groups {
		// A repeat is done when count runs completed, however many
		// attempts it took.
		done, total := g.GetCounts().GetCompleted(), g.GetTotal()
		if r := g.GetRepeat(); r != nil {
			done, total = r.GetRunsCompleted(), r.GetCount()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", g.GetId(), g.GetName(), g.GetMode(), g.GetStatus(),
			done, total, timeText(g.GetCreatedAt()))
	}
	return tw.Flush()
}

func (a *app) groupGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a task group and its members (-o json|yaml for all of it)",
		Args:  idArgsOf("group"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.groups.GetTaskGroup(ctx, &taskv1.GetTaskGroupRequest{Id: args[0]})
				g := resp.GetGroup()
				return g, func(w io.Writer) error { return describeGroup(w, g, visible(g, groupTree(g.GetTasks()))) }, err
			})
		},
	}
}

// groupChangeCommand is start or cancel.
func (a *app) groupChangeCommand(verb, short string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  idArgsOf("group"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				var g *taskv1.TaskGroup
				var err error
				if verb == "start" {
					var resp *taskv1.StartTaskGroupResponse
					resp, err = c.groups.StartTaskGroup(ctx, &taskv1.StartTaskGroupRequest{Id: args[0]})
					g = resp.GetGroup()
				} else {
					var resp *taskv1.CancelTaskGroupResponse
					resp, err = c.groups.CancelTaskGroup(ctx, &taskv1.CancelTaskGroupRequest{Id: args[0], Reason: reason})
					g = resp.GetGroup()
				}
				return g, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s %s\n", g.GetId(), g.GetStatus()); return err }, err
			})
		},
	}
	if verb == "cancel" {
		cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the cancellation)")
	}
	return cmd
}

func (a *app) groupDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a group that ended (or never started) and its tasks",
		Args:  idArgsOf("group"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.groups.DeleteTaskGroup(ctx, &taskv1.DeleteTaskGroupRequest{Id: args[0]})
				return resp, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s deleted\n", args[0]); return err }, err
			})
		},
	}
}

func (a *app) groupResetCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reset ID --reason TEXT",
		Short: "Close a repeat's open circuit breaker (operator key)",
		Long: `Close the open circuit breaker of a repeat so that its runs resume. Only an
operator key may (--admin-key, TASKMESH_ADMIN_KEY or admin_key:); the
operator, the reason and the time are recorded in the audit log.`,
		Args: idArgsOf("group"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageErrorf(cmd, "--reason is required: say why the breaker may close")
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.groups.ResetTaskGroupRepeat(ctx, &taskv1.ResetTaskGroupRepeatRequest{Id: args[0], Reason: reason})
				g := resp.GetGroup()
				return g, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "%s breaker closed by %s: %s\n", g.GetId(), g.GetRepeat().GetResetBy(), g.GetRepeat().GetResetReason())
					return err
				}, err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the breaker may close (required)")
	return cmd
}

// describeGroup prints a group's fields and its member tree.
func describeGroup(out io.Writer, g *taskv1.TaskGroup, tree []treeLine) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ID", g.GetId())
	row("Name", g.GetName())
	row("Mode", g.GetMode())
	row("Status", g.GetStatus())
	row("Progress", groupProgress(g))
	if r := g.GetRepeat(); r != nil {
		row("Runs", fmt.Sprintf("%d of %d completed, %d failed (%d in a row), %d at once, %ds apart, backoff %ds",
			r.GetRunsCompleted(), r.GetCount(), r.GetFailures(), r.GetConsecutiveFailures(), r.GetParallel(), r.GetIntervalSec(), r.GetBackoffSec()))
		if r.GetCircuitOpen() {
			row("Breaker", fmt.Sprintf("OPEN after %d failures in a row: an operator must reset it", r.GetConsecutiveFailures()))
		}
		if r.GetResetBy() != "" {
			row("Last reset", fmt.Sprintf("%s by %s: %s", timeText(r.GetResetAt()), r.GetResetBy(), r.GetResetReason()))
		}
		row("Next run at", timeText(r.GetNextRunAt()))
	}
	row("Created", timeText(g.GetCreatedAt()))
	row("Started", timeText(g.GetStartedAt()))
	row("Ended", timeText(g.GetEndedAt()))
	row("Error", g.GetError())
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeTree(out, tree)
}

// groupProgress is "3/4 completed, 1 running" and a bar.
func groupProgress(g *taskv1.TaskGroup) string {
	c := g.GetCounts()
	total := g.GetTotal()
	if r := g.GetRepeat(); r != nil {
		total = r.GetCount()
	}
	parts := []string{fmt.Sprintf("%d/%d completed", c.GetCompleted(), total)}
	for _, s := range []struct {
		n    int32
		what string
	}{{c.GetRunning(), "running"}, {c.GetAssigned(), "assigned"}, {c.GetFailed(), "failed"}, {c.GetCancelled(), "cancelled"}} {
		if s.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", s.n, s.what))
		}
	}
	done := 0
	if total > 0 {
		done = int(c.GetCompleted()) * barWidth / int(total)
	}
	return fmt.Sprintf("[%s%s] %s", strings.Repeat("#", done), strings.Repeat(" ", barWidth-done), strings.Join(parts, ", "))
}

// treeLine is one member in the member tree: indented by its depth (the
// longest chain of dependencies above it).
type treeLine struct {
	depth  int
	member *taskv1.TaskGroupMember
}

// groupTree orders members for display: each at the depth of its longest
// dependency chain, under the group order.
func groupTree(members []*taskv1.TaskGroupMember) []treeLine {
	index := map[string]*taskv1.TaskGroupMember{}
	for _, m := range members {
		index[m.GetId()] = m
	}
	depth := map[string]int{}
	var depthOf func(id string, seen map[string]bool) int
	depthOf = func(id string, seen map[string]bool) int {
		if d, ok := depth[id]; ok {
			return d
		}
		if seen[id] {
			return 0
		}
		seen[id] = true
		d := 0
		if m := index[id]; m != nil {
			for _, dep := range m.GetDependsOn() {
				d = max(d, depthOf(dep, seen)+1)
			}
		}
		depth[id] = d
		return d
	}
	out := make([]treeLine, 0, len(members))
	for _, m := range members {
		out = append(out, treeLine{depth: depthOf(m.GetId(), map[string]bool{}), member: m})
	}
	// Stable by depth: a dag reads top to bottom, a serial chain as steps.
	slices.SortStableFunc(out, func(a, b treeLine) int { return a.depth - b.depth })
	return out
}

// maxEndedRuns bounds the ended runs a repeat's tree shows: a repeat may
// have run thousands of times; its open runs and the last few matter.
const maxEndedRuns = 5

// visible drops all but the last maxEndedRuns ended runs of a repeat.
func visible(g *taskv1.TaskGroup, tree []treeLine) []treeLine {
	if g.GetRepeat() == nil {
		return tree
	}
	var out []treeLine
	ended := 0
	for i := len(tree) - 1; i >= 0; i-- {
		switch tree[i].member.GetStatus() {
		case "completed", "failed", "cancelled":
			if ended++; ended > maxEndedRuns {
				continue
			}
		}
		out = append(out, tree[i])
	}
	slices.Reverse(out)
	return out
}

func writeTree(out io.Writer, tree []treeLine) error {
	if len(tree) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATUS\tTASK\tAFTER")
	for i, l := range tree {
		m := l.member
		name := m.GetId()
		if l.depth > 0 {
			// The last member of its depth closes the branch.
			branch := "└─ "
			if i+1 < len(tree) && tree[i+1].depth == l.depth {
				branch = "├─ "
			}
			name = strings.Repeat("  ", l.depth-1) + branch + name
		}
		status := m.GetStatus()
		if m.GetError() != "" && m.GetStatus() != "completed" {
			status += " (" + m.GetError() + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, status, orDash(m.GetTaskId()), strings.Join(m.GetDependsOn(), ", "))
	}
	return tw.Flush()
}

// writeCreatedGroup prints a created group as the other create commands
// print what they create: one group alone, with nothing after it, is
// pretty-printed; a watch's first line, or one of several documents'
// groups, is one JSON line (one YAML document), so the output stays one
// JSON Lines (YAML) stream.
func writeCreatedGroup(w io.Writer, format string, g *taskv1.TaskGroup, stream bool) error {
	if stream {
		return writeProtoLine(w, format, g)
	}
	return writeProto(w, format, g)
}
