package ctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func (a *app) groupWatchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a task group: its member tree with live status and progress",
		Long: `Follow a task group until it and all its members have ended. On a terminal
the member tree (indented by dependencies) is redrawn with each member's
status and the group's progress bar; otherwise a line is printed for each
member that changes. Exits 0 when the group completed, 1 when it failed or
was cancelled. With -o json or -o yaml each change is printed as the group
with the members that changed.`,
		Args: idArgs,
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
			_, err = a.newGroupWatcher(cmd, c, format).run(cmd.Context(), args[0])
			return err
		},
	}
}

// groupWatcher follows one WatchTaskGroup stream. The first message of a
// stream holds every member, later ones the members that changed; the
// watcher keeps the whole tree. A broken stream is re-opened (its first
// message is the whole group again).
type groupWatcher struct {
	groups taskv1.TaskGroupServiceClient
	out    io.Writer
	errOut io.Writer
	format string
	live   bool // redraw the tree in place (a terminal)
	now    func() time.Time
	// firstAnswer and connected are as in watcher: a watch that never
	// reached the server fails instead of reconnecting.
	firstAnswer time.Duration
	connected   bool

	members map[string]*taskv1.TaskGroupMember
	order   []string
	drawn   int // lines of the last drawing
	version int64
}

func (a *app) newGroupWatcher(cmd *cobra.Command, c *conn, format string) *groupWatcher {
	out := cmd.OutOrStdout()
	return &groupWatcher{groups: c.groups, out: out, errOut: cmd.ErrOrStderr(), format: format,
		live: format == formatTable && a.terminal(out), now: a.now, firstAnswer: max(a.timeout, 0),
		members: map[string]*taskv1.TaskGroupMember{}}
}

// run watches until the group has settled and returns it; the error is a
// *TaskEndedError when it failed or was cancelled.
func (w *groupWatcher) run(ctx context.Context, id string) (*taskv1.TaskGroup, error) {
	backoff := watchMinBackoff
	var failingSince time.Time
	for {
		final, received, err := w.stream(ctx, id)
		if final != nil {
			if s := final.GetStatus(); s != "completed" {
				return final, &TaskEndedError{ID: "group " + final.GetId(), Status: s, Reason: final.GetError()}
			}
			return final, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("watch of %s stopped: %w", id, ctx.Err())
		}
		if !retryable(err) {
			return nil, err
		}
		if received {
			w.connected = true
			backoff, failingSince = watchMinBackoff, time.Time{}
		}
		if !w.connected {
			return nil, &opError{Op: "watch " + id, Err: err}
		}
		if failingSince.IsZero() {
			failingSince = w.now()
		} else if w.now().Sub(failingSince) > watchGiveUp {
			return nil, &opError{Op: fmt.Sprintf("watch %s: gave up reconnecting after %s", id, watchGiveUp), Err: err}
		}
		fmt.Fprintf(w.errOut, "note: watch of %s interrupted (%s); reconnecting in %s\n", id, reason(err), backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("watch of %s stopped: %w", id, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
}

func (w *groupWatcher) stream(ctx context.Context, id string) (final *taskv1.TaskGroup, received bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := firstAnswerTimer(w.connected, w.firstAnswer, cancel)
	defer stop()
	s, err := w.groups.WatchTaskGroup(ctx, &taskv1.WatchTaskGroupRequest{Id: id})
	if err != nil {
		return nil, false, noAnswer(ctx, err, id, w.firstAnswer)
	}
	first := true
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil, received, errStreamEnded
		}
		if err != nil {
			return nil, received, noAnswer(ctx, err, id, w.firstAnswer)
		}
		stop()
		received = true
		g := resp.GetGroup()
		if err := w.show(g, first); err != nil {
			return nil, received, err
		}
		first = false
		if settled(g) {
			return w.whole(g), received, nil
		}
	}
}

// settled: the group and every member have ended.
func settled(g *taskv1.TaskGroup) bool {
	c := g.GetCounts()
	open := c.GetPending() + c.GetAssigned() + c.GetRunning() + c.GetPreempted() + c.GetSuspended()
	return (g.GetStatus() == "completed" || g.GetStatus() == "failed" || g.GetStatus() == "cancelled") && open == 0
}

// whole is g with every member the watcher knows.
func (w *groupWatcher) whole(g *taskv1.TaskGroup) *taskv1.TaskGroup {
	out := proto.CloneOf(g)
	out.Tasks = make([]*taskv1.TaskGroupMember, 0, len(w.order))
	for _, id := range w.order {
		out.Tasks = append(out.Tasks, w.members[id])
	}
	return out
}

// show merges one message and prints it.
func (w *groupWatcher) show(g *taskv1.TaskGroup, first bool) error {
	var changed []*taskv1.TaskGroupMember
	for _, m := range g.GetTasks() {
		old, seen := w.members[m.GetId()]
		if !seen {
			w.order = append(w.order, m.GetId())
		}
		w.members[m.GetId()] = m
		if !seen || old.GetStatus() != m.GetStatus() {
			changed = append(changed, m)
		}
	}
	if g.GetVersion() <= w.version && !first {
		return nil
	}
	w.version = g.GetVersion()
	switch {
	case w.format != formatTable:
		return writeProtoLine(w.out, w.format, g)
	case w.live:
		return w.redraw(g)
	}
	at := w.now().Format("15:04:05")
	if first {
		fmt.Fprintf(w.out, "%s group %s (%s) %s %s\n", at, g.GetId(), g.GetMode(), g.GetStatus(), groupProgress(g))
		return writeTree(w.out, visible(g, groupTree(w.whole(g).GetTasks())))
	}
	for _, m := range changed {
		line := fmt.Sprintf("%s %s → %s", at, m.GetId(), m.GetStatus())
		if m.GetError() != "" && m.GetStatus() != "completed" {
			line += " (" + m.GetError() + ")"
		}
		fmt.Fprintln(w.out, line)
	}
	fmt.Fprintf(w.out, "%s group %s %s\n", at, g.GetStatus(), groupProgress(g))
	return nil
}

// redraw replaces the last drawing with the group's tree.
func (w *groupWatcher) redraw(g *taskv1.TaskGroup) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "group %s (%s) %s %s\n", g.GetName(), g.GetMode(), g.GetStatus(), groupProgress(g))
	if r := g.GetRepeat(); r != nil && r.GetCircuitOpen() {
		fmt.Fprintf(&b, "circuit breaker OPEN after %d failures in a row: an operator must reset it\n", r.GetConsecutiveFailures())
	}
	if err := writeTree(&b, visible(g, groupTree(w.whole(g).GetTasks()))); err != nil {
		return err
	}
	if w.drawn > 0 {
		fmt.Fprintf(w.out, "\x1b[%dA\x1b[J", w.drawn) // up over the last drawing, clear below
	}
	w.drawn = strings.Count(b.String(), "\n")
	_, err := w.out.Write(b.Bytes())
	return err
}
