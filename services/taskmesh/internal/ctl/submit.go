package ctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"google.golang.org/protobuf/proto"
)

// submitted is one create request and what it created, for -o json|yaml.
type submitted struct {
	Source    string   `json:"source" yaml:"source"`
	RequestID string   `json:"request_id,omitempty" yaml:"request_id,omitempty"`
	TaskIDs   []string `json:"task_ids" yaml:"task_ids"`
}

func (a *app) submitCommand() *cobra.Command {
	var files []string
	var requestID string
	var wait bool
	cmd := &cobra.Command{
		Use:   "submit -f FILE [-f FILE…]",
		Short: "Create tasks from task files (YAML or JSON; - reads standard input)",
		Long: `Create tasks from task files, in any of these forms:

  task: {name, type, command, args, …}        a single task
  local_queue: {tasks: [{…}, {…}]}            an agent's local queue
  {name, type, command, args, …}              a bare task

A task's id in the file names it: submitting the same file again while
its task waits or runs prints the same task id instead of creating a new
task, and runs it again once the task ended. --request-id replaces the ids
with a retry key that never creates twice, whatever became of the tasks
(with several tasks, each gets --request-id-<n>). State fields
of a local queue (status, attempt_id, …) are ignored with a note, and the
queue's machine_id becomes the machine of its tasks that name no placement.
Prints the id of every created task, one per line (targets create one task
per machine or IP). Every document is checked before anything is sent;
the tasks are then created in order, and should the server refuse one,
the error names the tasks submitted before it.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := a.format(cmd)
			if err != nil {
				return err
			}
			if len(files) == 0 {
				return usageErrorf(cmd, "no task file: give -f FILE (or -f - for standard input)")
			}
			tasks, err := a.readTaskFiles(cmd, files)
			if err != nil {
				return err
			}
			applyRequestID(tasks, requestID)
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()

			out := cmd.OutOrStdout()
			var results []submitted
			var ids []string
			for _, t := range tasks {
				ctx, cancel := a.call(cmd.Context())
				req := &taskv1.CreateTaskRequest{Spec: t.Spec}
				if t.Retry {
					req.RequestId = t.ID
				} else if t.ID != "" {
					req.Spec = proto.Clone(t.Spec).(*taskv1.TaskSpec)
					req.Spec.Id = t.ID
				}
				resp, err := c.tasks.CreateTask(ctx, req)
				cancel()
				if err != nil {
					// Tasks created before the failure stay created; show
					// them so the user knows what to clean up or re-submit
					// (re-submitting is safe where the files have ids).
					if perr := printSubmitted(out, format, wait, results, ids); perr != nil {
						return perr
					}
					return &opError{Op: t.Where, Err: err, Done: submittedBefore(results)}
				}
				results = append(results, submitted{Source: t.Where, RequestID: t.ID, TaskIDs: resp.GetTaskIds()})
				ids = append(ids, resp.GetTaskIds()...)
			}
			if err := printSubmitted(out, format, wait, results, ids); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			return a.waitAll(cmd, c, ids, format)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&files, "file", "f", nil, "task file (YAML or JSON), - for standard input; repeatable")
	f.StringVar(&requestID, "request-id", "", "idempotency key for the create (default: the file's id)")
	f.BoolVar(&wait, "wait", false, "watch the created tasks until they are final; exit 1 if any failed or was cancelled")
	return cmd
}

// submittedBefore names the tasks earlier documents of the files
// submitted, for the error of a later one: they stay, and a rerun
// submits them again (creating them anew unless they have an id).
func submittedBefore(results []submitted) string {
	if len(results) == 0 {
		return ""
	}
	var parts []string
	for _, r := range results {
		parts = append(parts, fmt.Sprintf("%s (%s)", strings.Join(r.TaskIDs, ", "), r.Source))
	}
	return "submitted before it: " + strings.Join(parts, ", ")
}

// printSubmitted prints the created task ids one per line, or the
// submissions as JSON or YAML. Followed by a watch (stream), each
// submission is one JSON line or one YAML document, as each change after
// it is, so the whole output is one JSON Lines or YAML stream.
func printSubmitted(out io.Writer, format string, stream bool, results []submitted, ids []string) error {
	if format != formatTable && stream {
		for _, r := range results {
			if err := writeValueLine(out, format, r); err != nil {
				return err
			}
		}
		return nil
	}
	if format != formatTable {
		if results == nil {
			results = []submitted{}
		}
		return writeValue(out, format, results)
	}
	for _, id := range ids {
		if _, err := fmt.Fprintln(out, id); err != nil {
			return err
		}
	}
	return nil
}

// readTaskFiles parses every -f file, printing notes to stderr.
func (a *app) readTaskFiles(cmd *cobra.Command, files []string) ([]FileTask, error) {
	stdin := 0
	for _, f := range files {
		if f == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return nil, usageErrorf(cmd, "-f - given twice: standard input can be read once")
	}
	var all []FileTask
	for _, name := range files {
		var data []byte
		var err error
		display := name
		if name == "-" {
			display = "<stdin>"
			data, err = io.ReadAll(cmd.InOrStdin())
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("read task file: %w", err)
		}
		tasks, notes, err := ParseTaskFile(display, data)
		if err != nil {
			return nil, err
		}
		for _, n := range notes {
			fmt.Fprintln(cmd.ErrOrStderr(), "note: "+n)
		}
		all = append(all, tasks...)
	}
	return all, nil
}

// applyRequestID makes --request-id the idempotency key. Several tasks
// cannot share one key (the second create would return the first's
// tasks), so each gets the key with its position appended, which is as
// stable across re-runs as the files are.
func applyRequestID(tasks []FileTask, requestID string) {
	if requestID == "" {
		return
	}
	if len(tasks) == 1 {
		tasks[0].ID, tasks[0].Retry = requestID, true
		return
	}
	for i := range tasks {
		tasks[i].ID, tasks[i].Retry = requestID+"-"+strconv.Itoa(i+1), true
	}
}

// waitAll watches each task to its end, one after another (a later task
// ending first is simply shown when its turn comes), and fails if any did
// not complete.
func (a *app) waitAll(cmd *cobra.Command, c *conn, ids []string, format string) error {
	var failed []error
	for _, id := range ids {
		w := a.newWatcher(cmd, c, format)
		// The tasks were just created: the server was reached, so a
		// failing stream is a broken one, to re-open.
		w.connected = true
		if len(ids) > 1 {
			w.prefix = id + " "
		}
		_, err := w.run(cmd.Context(), id)
		var ended *TaskEndedError
		switch {
		case errors.As(err, &ended):
			failed = append(failed, err)
		case err != nil:
			return err
		}
	}
	return errors.Join(failed...)
}
