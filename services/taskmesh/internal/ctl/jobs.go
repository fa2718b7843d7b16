package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
)

// The pipeline's commands (docs/api/pipeline.md): upload and start a
// conversion job, read it, follow its stages, download its results.

// jobPollInterval is how often watch reads the job.
const jobPollInterval = 500 * time.Millisecond

// uploadChunkBytes is the size of the messages a file is sent in.
const uploadChunkBytes = 256 << 10

func (a *app) jobsCommand() *cobra.Command {
	jobs := &cobra.Command{
		Use:     "jobs",
		Aliases: []string{"job"},
		Short:   "Convert models (ONNX → BIE → NEF): submit, get, watch and download jobs",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	jobs.AddCommand(a.jobsSubmitCommand(), a.jobsGetCommand(), a.jobsWatchCommand(), a.jobsDownloadCommand())
	return jobs
}

// JobEndedError reports a job that FAILED.
type JobEndedError struct{ ID, Step, Reason string }

func (e *JobEndedError) Error() string {
	return fmt.Sprintf("job %s FAILED in its %s stage: %s", e.ID, e.Step, e.Reason)
}

var jobIDArgs = usageArgs(func(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return errors.New("no job id given")
	case len(args) > 1:
		return fmt.Errorf("one job id, got %d arguments", len(args))
	}
	return nil
})

func (a *app) jobsSubmitCommand() *cobra.Command {
	var model, quant, refDir string
	var wait bool
	cmd := &cobra.Command{
		Use:   "submit --model FILE --quant FILE [--ref-images DIR] [--wait]",
		Short: "Upload a model and its quantization archive and start a job; print its id",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || quant == "" {
				return usageErrorf(cmd, "--model and --quant are required")
			}
			for flag, path := range map[string]string{"--model": model, "--quant": quant} {
				if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
					return usageErrorf(cmd, "%s %s: not a file that can be read", flag, path)
				}
			}
			refs, err := refImages(refDir)
			if err != nil {
				return usageErrorf(cmd, "--ref-images: %v", err)
			}
			format, err := a.format(cmd)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			req := &pipelinev1.CreateJobRequest{}
			if req.ModelKey, err = a.uploadFile(cmd.Context(), c, "model", model); err != nil {
				return err
			}
			if req.QuantKey, err = a.uploadFile(cmd.Context(), c, "quant", quant); err != nil {
				return err
			}
			for _, r := range refs {
				k, err := a.uploadFile(cmd.Context(), c, "ref_image", r)
				if err != nil {
					return err
				}
				req.RefImageKeys = append(req.RefImageKeys, k)
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := c.pipeline.CreateJob(ctx, req)
			if err != nil {
				return err
			}
			if !wait {
				return a.writeJob(cmd, resp, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "%s %s\n", resp.GetJobId(), resp.GetStatus())
					return err
				})
			}
			if format != formatTable {
				// The created job, then each change: one stream.
				if err := writeProtoLine(cmd.OutOrStdout(), format, resp); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "job %s\n", resp.GetJobId())
			}
			return a.watchJob(cmd, c, resp.GetJobId(), format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "the ONNX model file")
	f.StringVar(&quant, "quant", "", "the quantization archive (a zip)")
	f.StringVar(&refDir, "ref-images", "", "a directory of reference images (JPEG, PNG, BMP, WEBP)")
	f.BoolVar(&wait, "wait", false, "watch the job until it is COMPLETED or FAILED; exit 1 if it FAILED")
	return cmd
}

// refImages lists the files of dir, sorted ("" lists none).
func refImages(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// errUploadStalled cancels an upload that made no progress for --timeout.
var errUploadStalled = errors.New("upload stalled")

// uploadFile streams one file as an input of kind and returns its key.
//
// --timeout bounds each step of the upload (opening the stream, each
// chunk, the server's answer) rather than the whole of it: a large model
// on a slow link may take any time to send, but a server that stops
// answering must not hold the command for longer than the limit.
func (a *app) uploadFile(ctx context.Context, c *conn, kind, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	progress := func() {}
	if a.timeout > 0 {
		t := time.AfterFunc(a.timeout, func() { cancel(errUploadStalled) })
		defer t.Stop()
		progress = func() { t.Reset(a.timeout) }
	}
	stalled := func(err error) error {
		if errors.Is(context.Cause(ctx), errUploadStalled) {
			err = status.Errorf(codes.DeadlineExceeded, "no answer from the server within %s", a.timeout)
		}
		return &opError{Op: "uploading " + path, Err: err}
	}
	stream, err := c.pipeline.UploadJobInput(ctx)
	if err != nil {
		return "", stalled(err)
	}
	if err := stream.Send(&pipelinev1.UploadJobInputRequest{Part: &pipelinev1.UploadJobInputRequest_Header{
		Header: &pipelinev1.UploadHeader{Kind: kind, Filename: filepath.Base(path)}}}); err != nil && !errors.Is(err, io.EOF) {
		return "", stalled(err)
	}
	progress()
	buf := make([]byte, uploadChunkBytes)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&pipelinev1.UploadJobInputRequest{Part: &pipelinev1.UploadJobInputRequest_Chunk{
				Chunk: append([]byte(nil), buf[:n]...)}}); err != nil {
				break // the server ended the upload; CloseAndRecv says why
			}
			progress()
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return "", fmt.Errorf("%s: %w", path, rerr)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return "", stalled(err)
	}
	return resp.GetKey(), nil
}

func (a *app) writeJob(cmd *cobra.Command, m proto.Message, table func(io.Writer) error) error {
	format, err := a.format(cmd)
	if err != nil {
		return err
	}
	if format != formatTable {
		return writeProto(cmd.OutOrStdout(), format, m)
	}
	return table(cmd.OutOrStdout())
}

func (a *app) jobsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB_ID",
		Short: "Show a job: status, stage, progress, results, error",
		Args:  jobIDArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.pipeline.GetJob(ctx, &pipelinev1.GetJobRequest{JobId: args[0]})
				return resp.GetJob(), func(w io.Writer) error { return writeJobTable(w, resp.GetJob()) }, err
			})
		},
	}
}

func writeJobTable(w io.Writer, j *pipelinev1.Job) error {
	rows := [][2]string{{"job_id", j.GetJobId()}, {"status", j.GetStatus()}, {"stage", j.GetStage()},
		{"progress", fmt.Sprintf("%d%%", j.GetProgress())},
		{"created_at", j.GetCreatedAt().AsTime().Format(time.RFC3339)}, {"updated_at", j.GetUpdatedAt().AsTime().Format(time.RFC3339)},
		{"bie_key", orDash(j.GetOutput().GetBieKey().GetValue())}, {"nef_key", orDash(j.GetOutput().GetNefKey().GetValue())}}
	if e := j.GetError(); e != nil {
		rows = append(rows, [2]string{"error", e.GetStep() + ": " + e.GetReason()})
	}
	for _, s := range []string{"onnx", "bie", "nef"} {
		if id := j.GetStageTasks()[s]; id != "" {
			rows = append(rows, [2]string{s + "_task", id})
		}
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%-12s %s\n", r[0]+":", r[1]); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) jobsWatchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch JOB_ID",
		Short: "Follow a job's stages with a progress bar each until it is COMPLETED or FAILED",
		Long: `Follow a job's stages until it is COMPLETED or FAILED (exit 1), printing a
line of progress bars each time the job changes. With -o json each change
is printed as the whole job on one line (JSON Lines); with -o yaml as one
document.`,
		Args: jobIDArgs,
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
			return a.watchJob(cmd, c, args[0], format)
		},
	}
}

// watchJob prints a line of stage bars (or, in -o json|yaml, the job)
// whenever the job changes, until it is final; a FAILED job is a
// *JobEndedError.
func (a *app) watchJob(cmd *cobra.Command, c *conn, id, format string) error {
	var last string
	for {
		ctx, cancel := a.call(cmd.Context())
		resp, err := c.pipeline.GetJob(ctx, &pipelinev1.GetJobRequest{JobId: id})
		cancel()
		if err != nil {
			return err
		}
		j := resp.GetJob()
		// The bars are the change filter in every format: what they show
		// (stage, progress, status, error) is what a change is.
		if line := stageBars(j); line != last {
			last = line
			if format != formatTable {
				err = writeProtoLine(cmd.OutOrStdout(), format, j)
			} else {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			if err != nil {
				return err
			}
		}
		switch j.GetStatus() {
		case "COMPLETED":
			return nil
		case "FAILED":
			return &JobEndedError{ID: id, Step: j.GetError().GetStep(), Reason: j.GetError().GetReason()}
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(jobPollInterval):
		}
	}
}

// stageBars renders each stage's progress:
//
//	ONNX [##########] 100%  BIE [####      ]  40%  NEF [          ]   0%  BIE
func stageBars(j *pipelinev1.Job) string {
	order := []string{"ONNX", "BIE", "NEF"}
	cur := 0
	for i, s := range order {
		if s == j.GetStage() {
			cur = i
		}
	}
	var b strings.Builder
	for i, s := range order {
		p := 0
		switch {
		case i < cur, j.GetStatus() == "COMPLETED":
			p = 100
		case i == cur:
			p = int(j.GetProgress())
		}
		fmt.Fprintf(&b, "%s [%-10s] %3d%%  ", s, strings.Repeat("#", p/10), p)
	}
	b.WriteString(j.GetStatus())
	if e := j.GetError(); e != nil {
		b.WriteString(": " + e.GetReason())
	}
	return b.String()
}

func (a *app) jobsDownloadCommand() *cobra.Command {
	var dir string
	var logs bool
	cmd := &cobra.Command{
		Use:   "download JOB_ID [--dir DIR] [--logs]",
		Short: "Download a job's result.bie and result.nef (and its stage logs)",
		Args:  jobIDArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The directory is made as mkdir -p would, before anything is
			// asked of the server; one that cannot be made is a usage error.
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return usageErrorf(cmd, "--dir %s: %v", dir, err)
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			d, err := c.pipeline.GetJobDownloads(ctx, &pipelinev1.GetJobDownloadsRequest{JobId: args[0]})
			if err != nil {
				return err
			}
			files := map[string]string{"result.bie": d.GetBieUrl().GetValue(), "result.nef": d.GetNefUrl().GetValue()}
			if logs {
				files["onnx.log"], files["bie.log"], files["nef.log"] = d.GetLogs().GetOnnx().GetValue(),
					d.GetLogs().GetBie().GetValue(), d.GetLogs().GetNef().GetValue()
			}
			names := make([]string, 0, len(files))
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			got := 0
			for _, n := range names {
				if files[n] == "" {
					continue
				}
				size, err := fetch(cmd.Context(), files[n], filepath.Join(dir, n))
				if err != nil {
					return fmt.Errorf("%s: %w", n, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %d bytes\n", filepath.Join(dir, n), size)
				got++
			}
			if got == 0 {
				return fmt.Errorf("job %s has nothing to download yet", args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "directory to write the files to (made if missing)")
	cmd.Flags().BoolVar(&logs, "logs", false, "also download the stage logs")
	return cmd
}

// fetch GETs a signed link into path.
func fetch(ctx context.Context, u, path string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET answered %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
