// Package pipeline is the stage worker of the model-conversion pipeline,
// run by an agent of a stage's pool as a stage task's process (`taskmesh
// pipeline-stage run …`), and the stand-in stage programs it runs by
// default (`taskmesh pipeline-stage onnx|bie|nef --workdir DIR`).
//
// A worker, step by step (docs/api/pipeline.md, "Stage workers"):
//
//  1. Empty the work directory (the task's working directory), then
//     download each input from its signed link into it: the ONNX stage
//     gets its single input file, the BIE stage out.onnx and quant.zip,
//     the NEF stage out.bie; reference images go to ref_images/, which
//     always exists, and so do the images inside quant.zip.
//  2. Run the stage program in the work directory: the configured one
//     ("{workdir}" in its arguments stands for the directory), or the
//     built-in stand-in ("{self}" stands for this executable). Its output goes to the stage log and to stdout,
//     so its ::progress:: lines reach the agent.
//  3. Upload out.<stage> and the log through their signed links.
//  4. On any failure: upload the log anyway, print the reason as the last
//     line on stderr ("pipeline-stage: <reason>", which becomes the job's
//     error.reason) and exit 1.
//
// Transfers are retried with backoff for a while: the gateway serving the
// links may be restarting while the stage runs on.
package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Main runs `pipeline-stage` with args (what follows it on the command
// line) and returns the exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: pipeline-stage run|onnx|bie|nef|noop [flags]")
		return 2
	}
	var err error
	switch cmd := args[0]; cmd {
	case "run":
		err = runWorker(args[1:])
	case "onnx", "bie", "nef", "noop":
		err = runStandIn(cmd, args[1:])
	default:
		err = fmt.Errorf("unknown command %q (run, onnx, bie, nef or noop)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline-stage: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// runStandIn runs a stand-in stage program on --workdir.
func runStandIn(stage string, args []string) error {
	fs := flag.NewFlagSet("pipeline-stage "+stage, flag.ContinueOnError)
	dir := fs.String("workdir", ".", "the stage's work directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if stage == "noop" {
		out := fs.Arg(0)
		if out == "" {
			return errors.New("noop: name the output file to create (out.onnx, out.bie or out.nef)")
		}
		return os.WriteFile(filepath.Join(*dir, filepath.Base(out)), nil, 0o644)
	}
	return stages[stage](*dir, os.Stdout)
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// job is what a worker was asked to do.
type job struct {
	id, stage      string
	dir            string
	inputs         multiFlag
	output, logURL string
	logLimit       int64
	program        []string
}

func parseWorker(args []string) (job, error) {
	var j job
	var program string
	fs := flag.NewFlagSet("pipeline-stage run", flag.ContinueOnError)
	fs.StringVar(&j.id, "job", "", "job id")
	fs.StringVar(&j.stage, "stage", "", "onnx, bie or nef")
	fs.StringVar(&j.dir, "workdir", "", "work directory (default: the current directory)")
	fs.Var(&j.inputs, "input", "name=URL of an input (repeated)")
	fs.StringVar(&j.output, "output", "", "signed PUT URL of out.<stage>")
	fs.StringVar(&j.logURL, "log", "", "signed PUT URL of the stage log")
	fs.Int64Var(&j.logLimit, "log-limit", 16<<20, "bytes of log kept")
	fs.StringVar(&program, "program", "", "the stage program's arguments as a JSON array; {workdir} is the work directory")
	if err := fs.Parse(args); err != nil {
		return j, err
	}
	if _, ok := stages[j.stage]; !ok {
		return j, fmt.Errorf("--stage %q is not onnx, bie or nef", j.stage)
	}
	if j.output == "" || j.logURL == "" {
		return j, errors.New("--output and --log are required")
	}
	if program != "" {
		if err := json.Unmarshal([]byte(program), &j.program); err != nil || len(j.program) == 0 {
			return j, fmt.Errorf("--program must be a non-empty JSON array of strings: %q", program)
		}
	}
	if j.dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return j, err
		}
		j.dir = wd
	}
	return j, nil
}

func runWorker(args []string) error {
	j, err := parseWorker(args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	log := &stageLog{limit: j.logLimit}
	out := io.MultiWriter(os.Stdout, log)
	fmt.Fprintf(log, "pipeline-stage %s of job %s, in %s\n", j.stage, j.id, j.dir)
	err = j.work(ctx, out)
	if err != nil {
		fmt.Fprintf(log, "FAILED: %s\n", oneLine(err.Error()))
	} else {
		fmt.Fprintf(log, "done\n")
	}
	if uerr := put(ctx, j.logURL, "text/plain; charset=utf-8", log.Bytes()); uerr != nil && err == nil {
		err = fmt.Errorf("uploading the log: %w", uerr)
	}
	if err == nil {
		progress(os.Stdout, 100, "done")
	}
	return err
}

// work runs steps 1–3 of the package doc.
func (j job) work(ctx context.Context, out io.Writer) error {
	if err := resetDir(j.dir); err != nil {
		return err
	}
	progress(out, 1, "downloading inputs")
	for _, in := range j.inputs {
		name, u, ok := strings.Cut(in, "=")
		if !ok || name == "" || !filepath.IsLocal(name) {
			return fmt.Errorf("--input %q is not name=URL with a relative name", in)
		}
		if err := download(ctx, u, filepath.Join(j.dir, name)); err != nil {
			return fmt.Errorf("downloading %s: %w", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(j.dir, "quant.zip")); err == nil {
		n, err := extractQuantImages(j.dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "quant.zip: %d images into %s/\n", n, RefImagesDir)
	}
	progress(out, 10, "running the "+j.stage+" stage")
	if len(j.program) > 0 {
		if err := j.runProgram(ctx, out); err != nil {
			return err
		}
	} else if err := stages[j.stage](j.dir, out); err != nil {
		return err
	}
	name := "out." + j.stage
	path := filepath.Join(j.dir, name)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("the %s stage wrote no %s", j.stage, name)
	}
	progress(out, 95, "uploading "+name)
	if err := putFile(ctx, j.output, "application/octet-stream", path); err != nil {
		return fmt.Errorf("uploading %s: %w", name, err)
	}
	return nil
}

// runProgram runs the configured stage program in the work directory.
func (j job) runProgram(ctx context.Context, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	argv := make([]string, len(j.program))
	for i, a := range j.program {
		argv[i] = strings.NewReplacer("{workdir}", j.dir, "{self}", exe).Replace(a)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout = j.dir, out
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(out, &stderr)
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
			return fmt.Errorf("%s: %s", filepath.Base(argv[0]), strings.TrimPrefix(last, "pipeline-stage: "))
		}
		return fmt.Errorf("the stage program %s failed: %w", filepath.Base(argv[0]), err)
	}
	return nil
}

// resetDir empties dir (a retried attempt may find a previous one's
// files) and creates ref_images/ in it.
func resetDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(dir, RefImagesDir), 0o755)
}

// stageLog keeps the first limit bytes of a stage's log.
type stageLog struct {
	bytes.Buffer
	limit   int64
	dropped int64
}

func (l *stageLog) Write(p []byte) (int, error) {
	room := l.limit - int64(l.Len()) - 64
	switch {
	case room <= 0:
		l.dropped += int64(len(p))
	case int64(len(p)) > room:
		l.Buffer.Write(p[:room])
		l.dropped += int64(len(p)) - room
	default:
		l.Buffer.Write(p)
	}
	return len(p), nil
}

func (l *stageLog) Bytes() []byte {
	if l.dropped == 0 {
		return l.Buffer.Bytes()
	}
	return append(l.Buffer.Bytes(), fmt.Sprintf("\n[%d more bytes of log dropped]\n", l.dropped)...)
}

// Retry policy of transfers: up to transferTries attempts, backing off
// from 200 ms to 10 s (about two minutes in all).
const (
	transferTries = 16
	maxBackoff    = 10 * time.Second
)

var client = &http.Client{Timeout: 10 * time.Minute}

// retry runs op until it succeeds, fails for good, or the tries run out.
func retry(ctx context.Context, op func() (retryable bool, err error)) error {
	backoff := 200 * time.Millisecond
	var err error
	for i := 0; i < transferTries; i++ {
		var again bool
		if again, err = op(); err == nil || !again {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
	return err
}

// download GETs u into path.
func download(ctx context.Context, u, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return retry(ctx, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return true, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode >= 500, fmt.Errorf("GET answered %s", resp.Status)
		}
		f, err := os.Create(path)
		if err != nil {
			return false, err
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			f.Close()
			return true, err
		}
		return false, f.Close()
	})
}

// put PUTs body to u with contentType.
func put(ctx context.Context, u, contentType string, body []byte) error {
	return putFrom(ctx, u, contentType, func() (io.ReadCloser, int64, error) {
		return io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	})
}

// putFile PUTs the file at path to u, streaming it.
func putFile(ctx context.Context, u, contentType, path string) error {
	return putFrom(ctx, u, contentType, func() (io.ReadCloser, int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, st.Size(), nil
	})
}

// putFrom PUTs what open returns (opened again for each try) to u.
func putFrom(ctx context.Context, u, contentType string, open func() (io.ReadCloser, int64, error)) error {
	return retry(ctx, func() (bool, error) {
		body, size, err := open()
		if err != nil {
			return false, err
		}
		defer body.Close()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, body)
		if err != nil {
			return false, err
		}
		req.ContentLength = size
		if size == 0 {
			// A zero length with a body reads as "unknown" (chunked).
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", contentType)
		resp, err := client.Do(req)
		if err != nil {
			return true, err
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return resp.StatusCode >= 500, fmt.Errorf("PUT answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
		}
		return false, nil
	})
}
