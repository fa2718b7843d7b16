package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
)

// Reconnect policy of watch: back off from watchMinBackoff to
// watchMaxBackoff, and give up once reconnecting has failed for
// watchGiveUp without a single message in between.
const (
	watchMinBackoff = 200 * time.Millisecond
	watchMaxBackoff = 5 * time.Second
	watchGiveUp     = 2 * time.Minute
	barWidth        = 30
)

func (a *app) watchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a task until it is final (exit 0 completed, 1 failed or cancelled)",
		Long: `Follow a task until it is final, printing a line for each change of its
status, progress, progress message or attempt. On a terminal a progress
bar follows the lines. A broken stream is re-opened without printing what
was already shown; a watch that never reached the server (or got no answer
within --timeout) fails at once. Exits 0 when the task completed, 1 when it
failed or was cancelled (or the server could not be reached), 130 when
interrupted. With -o json (one object per line) or -o yaml (one document per
change) each change is printed as the whole task.`,
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
			_, err = a.newWatcher(cmd, c, format).run(cmd.Context(), args[0])
			return err
		},
	}
}

// watcher follows one task's WatchTask stream.
//
// The scheduler sends the task when the stream opens and after every
// change, and ends the stream once the task is final. A stream can also
// end early (gateway restart, network), so run re-opens it; the first
// message of a new stream repeats the current state, which the version
// and change filter keep from being printed twice.
type watcher struct {
	tasks  taskv1.TaskServiceClient
	out    io.Writer
	errOut io.Writer
	format string
	bar    bool   // draw a live progress bar after the lines
	prefix string // printed before each line (the task id when several are watched)
	now    func() time.Time

	minBackoff, maxBackoff, giveUp time.Duration
	// firstAnswer bounds the wait for the first message while the watch
	// has never connected (--timeout; 0: gRPC's own connect timeout).
	firstAnswer time.Duration
	// connected: a stream has delivered a message (or the caller reached
	// the server just before). Only then is a failure a broken stream
	// worth re-opening; before, the server was never reachable and
	// retrying would only hide a wrong --server.
	connected bool

	lastVersion int32
	lastChange  string
	barShown    bool
}

func (a *app) newWatcher(cmd *cobra.Command, c *conn, format string) *watcher {
	out := cmd.OutOrStdout()
	return &watcher{
		tasks: c.tasks, out: out, errOut: cmd.ErrOrStderr(), format: format,
		bar: format == formatTable && a.terminal(out), now: a.now,
		minBackoff: watchMinBackoff, maxBackoff: watchMaxBackoff, giveUp: watchGiveUp, firstAnswer: max(a.timeout, 0),
	}
}

// errStreamEnded is a stream that closed before the task was final.
var errStreamEnded = errors.New("the server closed the watch before the task was final")

// run watches until the task is final and returns it; the error is a
// *TaskEndedError when it failed or was cancelled.
func (w *watcher) run(ctx context.Context, id string) (*taskv1.Task, error) {
	defer w.clearBar()
	backoff := w.minBackoff
	var failingSince time.Time
	for {
		final, received, err := w.stream(ctx, id)
		if final != nil {
			return final, outcome(final)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("watch of %s stopped: %w", id, ctx.Err())
		}
		if !retryable(err) {
			return nil, err
		}
		if received {
			w.connected = true
			backoff, failingSince = w.minBackoff, time.Time{}
		}
		if !w.connected {
			return nil, &opError{Op: "watch " + id, Err: err}
		}
		if failingSince.IsZero() {
			failingSince = w.now()
		} else if w.now().Sub(failingSince) > w.giveUp {
			return nil, &opError{Op: fmt.Sprintf("watch %s: gave up reconnecting after %s", id, w.giveUp), Err: err}
		}
		w.clearBar()
		fmt.Fprintf(w.errOut, "note: watch of %s interrupted (%s); reconnecting in %s\n", id, reason(err), backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("watch of %s stopped: %w", id, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, w.maxBackoff)
	}
}

// stream reads one WatchTask stream. It returns the task once it is final;
// otherwise why the stream ended and whether any message arrived.
func (w *watcher) stream(ctx context.Context, id string) (final *taskv1.Task, received bool, err error) {
	// Cancelling ends the stream when we return before the server does.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := w.awaitFirst(cancel)
	defer stop()
	s, err := w.tasks.WatchTask(ctx, &taskv1.WatchTaskRequest{Id: id})
	if err != nil {
		return nil, false, noAnswer(ctx, err, id, w.firstAnswer)
	}
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
		t := resp.GetTask()
		if err := w.show(t); err != nil {
			return nil, received, err
		}
		if isFinal(t.GetStatus()) {
			return t, true, nil
		}
	}
}

// errNoFirstAnswer cancels a first stream that got no message in time.
var errNoFirstAnswer = errors.New("no first answer")

// awaitFirst cancels the stream with errNoFirstAnswer unless the returned
// stop is called within w.firstAnswer. It applies only until the watch has
// connected: the server sends the task as soon as the stream opens, so a
// silent server is as unreachable as a missing one, while a connected
// watch may wait any time for the next change.
func (w *watcher) awaitFirst(cancel context.CancelCauseFunc) (stop func()) {
	return firstAnswerTimer(w.connected, w.firstAnswer, cancel)
}

func firstAnswerTimer(connected bool, d time.Duration, cancel context.CancelCauseFunc) (stop func()) {
	if connected || d <= 0 {
		return func() {}
	}
	t := time.AfterFunc(d, func() { cancel(errNoFirstAnswer) })
	return func() { t.Stop() }
}

// noAnswer turns the cancellation by firstAnswerTimer into the error a
// unary call that timed out would give.
func noAnswer(ctx context.Context, err error, id string, d time.Duration) error {
	if errors.Is(context.Cause(ctx), errNoFirstAnswer) {
		return &opError{Op: "watch " + id, Err: status.Errorf(codes.DeadlineExceeded, "no answer from the server within %s", d)}
	}
	return err
}

// retryable tells a broken stream (worth re-opening) from an answer
// (task not found, access denied), which re-opening would only repeat.
func retryable(err error) bool {
	if errors.Is(err, errStreamEnded) {
		return true
	}
	st, ok := grpcStatus(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.Canceled:
		return true
	case codes.Internal, codes.Unknown, codes.Aborted:
		// Transport failures (a reset stream) carry no business code;
		// the scheduler's own errors always do.
		for _, d := range st.Details() {
			if _, ok := d.(*errdetails.ErrorInfo); ok {
				return false
			}
		}
		return true
	}
	return false
}

func reason(err error) string {
	if st, ok := grpcStatus(err); ok {
		return oneLine(st.Message())
	}
	return err.Error()
}

func isFinal(s string) bool { return lifecycle.Status(s).Final() }

// outcome is nil for a completed task, else why it did not complete.
func outcome(t *taskv1.Task) error {
	if t.GetStatus() == string(lifecycle.StatusCompleted) {
		return nil
	}
	why := t.GetError()
	if why == "" && t.ExitCode != nil {
		why = "exit code " + strconv.Itoa(int(t.GetExitCode()))
	}
	return &TaskEndedError{ID: t.GetId(), Status: t.GetStatus(), Reason: why}
}

// change is what a watch line reports; other updates (lease renewals,
// heartbeats) bump the version without being worth a line.
func change(t *taskv1.Task) string {
	return fmt.Sprintf("%s\x00%d\x00%s\x00%s", t.GetStatus(), t.GetProgress(), t.GetProgressMessage(), t.GetAttemptId())
}

// show prints t if it is news: a version not seen yet that changes what a
// line reports.
func (w *watcher) show(t *taskv1.Task) error {
	if v := t.GetVersion(); v != 0 {
		if v <= w.lastVersion {
			return nil
		}
		w.lastVersion = v
	}
	c := change(t)
	if c == w.lastChange {
		return nil
	}
	w.lastChange = c
	if w.format != formatTable {
		return writeProtoLine(w.out, w.format, t)
	}
	w.clearBar()
	if _, err := fmt.Fprintln(w.out, w.prefix+watchLine(t, w.now)); err != nil {
		return err
	}
	if w.bar && !isFinal(t.GetStatus()) {
		_, err := fmt.Fprint(w.out, "\r"+w.prefix+progressBar(t))
		w.barShown = err == nil
		return err
	}
	return nil
}

// clearBar erases the progress bar line so the next output starts clean.
func (w *watcher) clearBar() {
	if w.barShown {
		fmt.Fprint(w.out, "\r\x1b[K")
		w.barShown = false
	}
}

// watchLine is one change as key=value pairs, easy to read and to grep:
//
//	2026-02-05T12:00:05Z running 40% attempt=0193… message="epoch 40/100"
func watchLine(t *taskv1.Task, now func() time.Time) string {
	when := timeText(t.GetUpdatedAt())
	if when == "" {
		when = now().UTC().Format(time.RFC3339)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d%%", when, t.GetStatus(), t.GetProgress())
	if a := t.GetAttemptId(); a != "" {
		fmt.Fprintf(&b, " attempt=%s", a)
	}
	if m := t.GetProgressMessage(); m != "" {
		fmt.Fprintf(&b, " message=%q", m)
	}
	if isFinal(t.GetStatus()) {
		if t.ExitCode != nil {
			fmt.Fprintf(&b, " exit_code=%d", t.GetExitCode())
		}
		if e := t.GetError(); e != "" {
			fmt.Fprintf(&b, " error=%q", e)
		}
	}
	return b.String()
}

// progressBar renders "[#########.....................]  30% running".
func progressBar(t *taskv1.Task) string {
	p := min(max(int(t.GetProgress()), 0), 100)
	filled := p * barWidth / 100
	return fmt.Sprintf("[%s%s] %3d%% %s", strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), p, t.GetStatus())
}
