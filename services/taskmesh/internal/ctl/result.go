package ctl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
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
	cmd := &cobra.Command{
		Use:   "result ID [-o FILE]",
		Short: "Print a finished task's output, or download it from the object store",
		Long: `Print a finished task's output. Small results are stored inline: their
stdout is printed (or written to FILE) and their stderr goes to standard
error. Large results live in the object store: the presigned link is
downloaded as is (streamed, to FILE or standard output) and checked against
its SHA-256. A FILE is written under a temporary name and renamed when
complete and verified, so it never holds a partial or corrupt result.`,
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
			if err := a.writeResult(cmd, r, outFile); err != nil {
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
	return cmd
}

func (a *app) writeResult(cmd *cobra.Command, r *taskv1.TaskResult, outFile string) error {
	switch r.GetStorageType() {
	case storageS3:
		if r.GetPresignedUrl() == "" {
			return fmt.Errorf("task %s: the result is in the object store but the server sent no link", r.GetTaskId())
		}
		return a.toOutput(cmd, outFile, func(w io.Writer) error {
			return a.download(cmd.Context(), r.GetPresignedUrl(), r.GetSha256(), r.GetSizeBytes(), w)
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

// toOutput runs write against standard output, or against a temporary
// file beside outFile that replaces it only when write succeeded.
func (a *app) toOutput(cmd *cobra.Command, outFile string, write func(io.Writer) error) error {
	if outFile == "" || outFile == "-" {
		return write(cmd.OutOrStdout())
	}
	dir, base := filepath.Split(outFile)
	if dir == "" {
		dir = "."
	}
	// 0600 (CreateTemp's mode): task output can hold anything.
	tmp, err := os.CreateTemp(dir, "."+base+".partial-*")
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if err := os.Rename(tmp.Name(), outFile); err != nil {
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
