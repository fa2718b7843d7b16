package ctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
)

// Storage types of TaskResult.
const (
	storageDB = "db"
	storageS3 = "s3"
)

func (a *app) resultCommand() *cobra.Command {
	var outFile string
	var raw bool
	cmd := &cobra.Command{
		Use:   "result ID [-o FILE] [--raw]",
		Short: "Print a finished task's output, or download it from the object store",
		Long: `Print a finished task's output: its stdout is printed (or written to FILE)
and its stderr goes to standard error, whatever the size. Small results
are stored inline; large ones (64 KiB or more) live in the object store,
whose presigned link is downloaded and checked against its SHA-256, and
the stdout and stderr it holds are printed as above. --raw writes the
stored object as is instead (the JSON with stdout, stderr and the bytes
the agent dropped, or a video task's MP4). A FILE is written under a
temporary name and renamed when complete and verified, so it never holds a
partial or corrupt result.`,
		Args: idArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := a.call(cmd.Context())
			resp, err := c.tasks.GetTaskResult(ctx, &taskv1.GetTaskResultRequest{Id: args[0]})
			cancel()
			if err != nil {
				return err
			}
			r := resp.GetResult()
			if err := a.writeResult(cmd, r, outFile, raw); err != nil {
				return err
			}
			if st := r.GetStatus(); st != string(lifecycle.StatusCompleted) {
				note := fmt.Sprintf("note: task %s is %s", args[0], st)
				if r.ExitCode != nil {
					note += fmt.Sprintf(" (exit code %d)", r.GetExitCode())
				}
				if r.GetError() != "" {
					note += ": " + oneLine(r.GetError())
				}
				fmt.Fprintln(cmd.ErrOrStderr(), note)
			}
			return nil
		},
	}
	// -o names a file here: the result is the task's own output, which
	// has no table, JSON or YAML form. This local flag shadows the global
	// -o of the other commands.
	cmd.Flags().StringVarP(&outFile, "output", "o", "", "write the result to FILE instead of standard output")
	cmd.Flags().BoolVar(&raw, "raw", false, "write an object-store result as stored (JSON, or a video's MP4) instead of its stdout")
	return cmd
}

func (a *app) writeResult(cmd *cobra.Command, r *taskv1.TaskResult, outFile string, raw bool) error {
	switch r.GetStorageType() {
	case storageS3:
		if r.GetPresignedUrl() == "" {
			return fmt.Errorf("task %s: the result is in the object store but the server sent no link", r.GetTaskId())
		}
		return a.toOutput(cmd, outFile, func(w io.Writer) error {
			if raw {
				return a.download(cmd.Context(), r.GetPresignedUrl(), r.GetSha256(), r.GetSizeBytes(), w)
			}
			u := &unwrapper{out: w}
			if err := a.download(cmd.Context(), r.GetPresignedUrl(), r.GetSha256(), r.GetSizeBytes(), u); err != nil {
				return err
			}
			return u.finish(cmd.ErrOrStderr())
		})
	case storageDB, "":
		if r.GetStorageType() == "" && !isFinal(r.GetStatus()) {
			return fmt.Errorf("task %s has no result yet (status %s)", r.GetTaskId(), r.GetStatus())
		}
		if err := a.toOutput(cmd, outFile, func(w io.Writer) error {
			_, err := io.WriteString(w, r.GetStdout())
			return err
		}); err != nil {
			return err
		}
		_, err := io.WriteString(cmd.ErrOrStderr(), r.GetStderr())
		return err
	}
	return fmt.Errorf("task %s: unknown result storage type %q", r.GetTaskId(), r.GetStorageType())
}

// storedOutput is the object a large result is stored as: the whole
// output of both streams (docs/api/tasks.md, CompleteTask; docs/executor.md,
// Output).
type storedOutput struct {
	Stdout               *string `json:"stdout"`
	Stderr               string  `json:"stderr"`
	StdoutTruncatedBytes int64   `json:"stdout_truncated_bytes"`
	StderrTruncatedBytes int64   `json:"stderr_truncated_bytes"`
}

// unwrapper receives a downloaded result object. An object that starts
// with "{" may be the stored output, which has to be read whole to be
// unwrapped, so it is kept; anything else (a video task's MP4) streams
// through as is.
type unwrapper struct {
	out     io.Writer
	held    bytes.Buffer
	decided bool // whether the object streams through
	pass    bool
}

func (u *unwrapper) Write(p []byte) (int, error) {
	if u.decided && u.pass {
		return u.out.Write(p)
	}
	u.held.Write(p)
	if !u.decided {
		if rest := bytes.TrimLeft(u.held.Bytes(), " \t\r\n"); len(rest) > 0 {
			u.decided, u.pass = true, rest[0] != '{'
			if u.pass {
				_, err := u.out.Write(u.held.Bytes())
				u.held.Reset()
				if err != nil {
					return 0, err
				}
			}
		}
	}
	return len(p), nil
}

// finish writes what was kept once the download is complete and
// verified: the stored output's stdout to out and its stderr to errOut,
// or the object as is when it is not the stored output.
func (u *unwrapper) finish(errOut io.Writer) error {
	if u.pass {
		return nil
	}
	var so storedOutput
	if err := json.Unmarshal(u.held.Bytes(), &so); err != nil || so.Stdout == nil {
		_, err := u.out.Write(u.held.Bytes())
		return err
	}
	if _, err := io.WriteString(u.out, *so.Stdout); err != nil {
		return err
	}
	if _, err := io.WriteString(errOut, so.Stderr); err != nil {
		return err
	}
	for _, d := range []struct {
		stream string
		n      int64
	}{{"stdout", so.StdoutTruncatedBytes}, {"stderr", so.StderrTruncatedBytes}} {
		if d.n > 0 {
			fmt.Fprintf(errOut, "note: %d bytes of %s were dropped by the agent's output limit\n", d.n, d.stream)
		}
	}
	return nil
}

// toOutput runs write against standard output, or against a temporary
// file beside outFile that replaces it only when write succeeded.
func (a *app) toOutput(cmd *cobra.Command, outFile string, write func(io.Writer) error) error {
	if outFile == "" || outFile == "-" {
		return write(cmd.OutOrStdout())
	}
	f, err := createPending(outFile)
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	defer f.discard()
	if err := write(f); err != nil {
		return err
	}
	if err := f.commit(); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// downloadTransport waits a bounded time for the object store to answer
// but not for the body, which may be large.
func downloadTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = time.Minute
	return t
}

// download streams a presigned URL into w, checking size and SHA-256 when
// the server gave them. Messages never show the URL's query: it is the
// signature that grants access.
func (a *app) download(ctx context.Context, rawURL, wantSHA string, wantSize int64, w io.Writer) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("download result: the server sent a malformed link")
	}
	shown := u.Scheme + "://" + u.Host + u.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return fmt.Errorf("download result from %s: %w", shown, redactURL(err, shown))
	}
	resp, err := a.httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("download result from %s: %w", shown, redactURL(err, shown))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := strings.TrimSpace(string(body))
		if msg != "" {
			msg = ": " + oneLine(msg)
		}
		return fmt.Errorf("download result from %s: %s%s", shown, resp.Status, msg)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return fmt.Errorf("download result from %s: %w", shown, redactURL(err, shown))
	}
	if wantSize > 0 && n != wantSize {
		return fmt.Errorf("download result from %s: got %d bytes, want %d", shown, n, wantSize)
	}
	if wantSHA != "" {
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, wantSHA) {
			return fmt.Errorf("download result from %s: sha256 %s, want %s: the download is corrupt", shown, got, wantSHA)
		}
	}
	return nil
}

// redactURL removes the signed URL from net/http's errors, which quote it.
func redactURL(err error, shown string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: shown, Err: ue.Err}
	}
	return err
}
