package video

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// progressPrefix marks a progress line on stdout; the shim reads it (see
// shim.ProgressPrefix).
const progressPrefix = "::progress::"

// stopGrace is how long ffmpeg may take to finish after SIGTERM before it
// is killed. The shim's own grace (SIGTERM to the whole group, then
// SIGKILL) still bounds the task as a whole.
const stopGrace = 3 * time.Second

// Render produces dir/OutputFile for the job. Progress lines go to progress
// (0 → 99 while ffmpeg encodes, 100 once the file is complete); ffmpeg's
// own messages go to stderr. Cancelling ctx stops ffmpeg (SIGTERM, then
// SIGKILL after a short grace) and returns an error wrapping ctx.Err().
func Render(ctx context.Context, j Job, dir string, progress, stderr io.Writer) error {
	g, err := geometryOf(j)
	if err != nil {
		return err
	}
	if j.FFmpeg == "" {
		return errors.New("no ffmpeg configured")
	}
	report(progress, 0, "preparing")
	in := inputs{output: tempOutput(dir)}
	switch j.Type {
	case ImageToVideo:
		in.image = filepath.Join(dir, "first-frame")
		if in.imageDemuxer, err = downloadImage(ctx, j.ImageURL, j.ImageLimit, j.ImageTimeout, in.image); err != nil {
			return err
		}
	case TextToVideo:
		if strings.TrimSpace(j.Prompt) == "" {
			return errors.New("text_to_video needs a prompt")
		}
		in.card = layoutCard(j.Prompt, g.width, g.height)
		for i, line := range in.card.lines {
			// User text reaches ffmpeg only as file content.
			p := filepath.Join(dir, fmt.Sprintf("line-%02d.txt", i))
			if err := os.WriteFile(p, []byte(line), 0o600); err != nil {
				return err
			}
			in.lines = append(in.lines, p)
		}
	default:
		return fmt.Errorf("video type %q is neither %s nor %s", j.Type, TextToVideo, ImageToVideo)
	}
	report(progress, 1, "rendering")
	if err := runFFmpeg(ctx, j.FFmpeg, ffmpegArgs(j, g, in), g, progress, stderr); err != nil {
		_ = os.Remove(in.output)
		return err
	}
	if fi, err := os.Stat(in.output); err != nil || fi.Size() == 0 {
		return errors.New("ffmpeg finished without writing the video")
	}
	if err := os.Rename(in.output, filepath.Join(dir, OutputFile)); err != nil {
		return err
	}
	report(progress, 100, "done")
	return nil
}

func report(w io.Writer, percent int, msg string) {
	fmt.Fprintf(w, "%s%d %s\n", progressPrefix, percent, msg)
}

// runFFmpeg runs ffmpeg in the current working directory (the task's work
// directory) and in this process's group, so a stop aimed at the task's
// group reaches it too.
func runFFmpeg(ctx context.Context, ffmpeg string, args []string, g geometry, progress, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, ffmpeg, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	// If this runner dies without stopping it, ffmpeg dies too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tail := &tailBuffer{max: 2048}
	cmd.Stderr = io.MultiWriter(stderr, tail)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start ffmpeg: %w", err)
	}
	parser := progressParser{total: g.length()}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if p, ok := parser.line(sc.Text()); ok {
			report(progress, max(p, 1), "rendering")
		}
	}
	err = cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("render stopped: %w", ctx.Err())
	case err != nil:
		if msg := tail.lastLine(); msg != "" {
			return fmt.Errorf("ffmpeg failed (%v): %s", err, msg)
		}
		return fmt.Errorf("ffmpeg failed: %w", err)
	}
	return nil
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := bytes.Split(bytes.TrimSpace(t.buf), []byte("\n"))
	return strings.TrimSpace(string(lines[len(lines)-1]))
}

// Main is the runner's command line, `executor shim video -dir <run dir>`:
// it renders the run directory's job and returns the exit code (0 done, 1
// failed with the reason in ErrorFile, 143 stopped by SIGTERM).
func Main(args []string) int {
	fs := flag.NewFlagSet("video", flag.ContinueOnError)
	dir := fs.String("dir", "", "run directory holding "+JobFile)
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: video -dir RUN_DIR")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	j, err := Load(*dir)
	if err == nil {
		err = Render(ctx, j, *dir, os.Stdout, os.Stderr)
	}
	if err == nil {
		return 0
	}
	msg := err.Error()
	if len(msg) > 4000 {
		msg = strings.ToValidUTF8(msg[:4000], "")
	}
	_ = os.WriteFile(filepath.Join(*dir, ErrorFile), []byte(msg+"\n"), 0o600)
	fmt.Fprintln(os.Stderr, "video:", msg)
	if ctx.Err() != nil {
		return 128 + int(syscall.SIGTERM)
	}
	return 1
}
