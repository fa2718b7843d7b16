package ctl

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/datebound"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
)

// maxPageSize is the server's largest page.
const maxPageSize = 500

// listStatuses are the values ListTasks accepts for status: every task
// status.
var listStatuses = func() []string {
	var out []string
	for _, s := range lifecycle.Statuses() {
		out = append(out, string(s))
	}
	return out
}()

func (a *app) listCommand() *cobra.Command {
	var status, typ, machine, group, since, until string
	var priority, limit int
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, newest first",
		Long: `List tasks, newest first: one page of --limit tasks, or every page with
--all (--limit is then the page size). The list is built from the event
stream and may trail the latest writes by a moment; get shows a task as of
every acknowledged write.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := a.format(cmd)
			if err != nil {
				return err
			}
			req := &taskv1.ListTasksRequest{Status: status, Type: typ, MachineId: machine, GroupId: group, PageSize: int32(limit)}
			if status != "" && !slices.Contains(listStatuses, status) {
				return usageErrorf(cmd, "--status %s: want one of %s", status, strings.Join(listStatuses, ", "))
			}
			if typ != "" && !slices.Contains(lifecycle.Types(), typ) {
				return usageErrorf(cmd, "--type %s: want one of %s", typ, strings.Join(lifecycle.Types(), ", "))
			}
			if limit < 1 || limit > maxPageSize {
				return usageErrorf(cmd, "--limit %d: want 1 to %d", limit, maxPageSize)
			}
			if cmd.Flags().Changed("priority") {
				if priority < 1 || priority > 10 {
					return usageErrorf(cmd, "--priority %d: want 1 (highest) to 10", priority)
				}
				p := int32(priority)
				req.Priority = &p
			}
			now := a.now()
			if req.CreatedAfter, err = parseWhen(since, now, sinceBound); err != nil {
				return usageErrorf(cmd, "--since: %v", err)
			}
			if req.CreatedBefore, err = parseWhen(until, now, datebound.ParseBefore); err != nil {
				return usageErrorf(cmd, "--until: %v", err)
			}
			if req.CreatedAfter != nil && req.CreatedBefore != nil && !req.CreatedAfter.AsTime().Before(req.CreatedBefore.AsTime()) {
				return usageErrorf(cmd, "--since %s is not before --until %s", since, until)
			}

			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			tasks, next, err := collectPages(all, func(token string) ([]*taskv1.Task, string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				req.PageToken = token
				resp, err := c.tasks.ListTasks(ctx, req)
				return resp.GetTasks(), resp.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			merged := &taskv1.ListTasksResponse{Tasks: tasks, NextPageToken: next}
			out := cmd.OutOrStdout()
			if format != formatTable {
				return writeProto(out, format, merged)
			}
			if err := writeTaskTable(out, merged.GetTasks()); err != nil {
				return err
			}
			return writeMore(cmd.ErrOrStderr(), merged.GetNextPageToken(), "tasks")
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only tasks in this status ("+strings.Join(listStatuses, ", ")+")")
	f.StringVar(&typ, "type", "", "only tasks of this type (shell, python, script, noop, video)")
	f.StringVar(&machine, "machine", "", "only tasks for this machine id")
	f.StringVar(&group, "group", "", "only tasks of this group id")
	f.IntVar(&priority, "priority", 0, "only tasks of this priority (1-10)")
	f.StringVar(&since, "since", "", "only tasks created at or after this time: a date (YYYY-MM-DD, UTC), RFC 3339, or a duration ago (90m, 24h, 7d)")
	f.StringVar(&until, "until", "", "only tasks created before this time: a date (YYYY-MM-DD, UTC, the day included), RFC 3339, or a duration ago")
	f.IntVar(&limit, "limit", 50, "tasks per page (1-500)")
	f.BoolVar(&all, "all", false, "follow every page")
	return cmd
}

func writeTaskTable(out io.Writer, tasks []*taskv1.Task) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tPRIO\tMACHINE\tCREATED\tPROGRESS")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d%%\n", t.GetId(), orDash(t.GetName()), t.GetStatus(), t.GetPriority(),
			orDash(t.GetMachineId()), orDash(timeText(t.GetCreatedAt())), t.GetProgress())
	}
	return tw.Flush()
}

// parseWhen reads --since/--until: a date or an RFC 3339 time, read by
// bound as the API reads created_after and created_before (a date in
// --until includes its whole day), or a duration before now (Go syntax,
// plus whole days such as 7d).
func parseWhen(s string, now time.Time, bound func(string) (time.Time, error)) (*timestamppb.Timestamp, error) {
	if s == "" {
		return nil, nil
	}
	if t, err := bound(s); err == nil {
		return timestamppb.New(t), nil
	}
	const want = "is neither a date (2026-02-05), an RFC 3339 time (2026-02-05T12:00:00Z) nor a duration (24h, 7d)"
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q %s", s, want)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return nil, fmt.Errorf("%q %s", s, want)
		}
	}
	return timestamppb.New(now.Add(-d)), nil
}

func sinceBound(s string) (time.Time, error) { return datebound.Parse(s, false) }

// checkBounds checks --from and --to as the audit log and usage read them
// (a date or an RFC 3339 time, docs/api/audit.md), so that a mistake is a
// usage error before anything is sent.
func checkBounds(from, to string) error {
	for _, b := range []struct{ flag, value string }{{"--from", from}, {"--to", to}} {
		if _, err := datebound.Parse(b.value, false); err != nil {
			return fmt.Errorf("%s %q: want a date (2026-02-05) or an RFC 3339 time (2026-02-05T12:00:00Z)", b.flag, b.value)
		}
	}
	return nil
}
