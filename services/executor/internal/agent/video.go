package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/video"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"google.golang.org/protobuf/encoding/protojson"
)

// findVideoTools looks for the video runner's tools once, at start-up. With
// the default types, video is claimed only when ffmpeg is here, and its
// absence is logged now rather than discovered by failing tasks later; an
// agent configured for video without ffmpeg does not start.
func findVideoTools(cfg *Config) (video.Tools, error) {
	wants := slices.Contains(cfg.Types, policy.TypeVideo)
	if !wants && !cfg.typesDefaulted {
		return video.Tools{}, nil
	}
	ffmpeg, err := video.FindFFmpeg(cfg.VideoFFmpeg)
	if err != nil {
		if wants {
			return video.Tools{}, fmt.Errorf("task type video: %w", err)
		}
		cfg.Logger.Warn("video tasks are not claimed: ffmpeg is missing", "err", err)
		return video.Tools{}, nil
	}
	font, cjk, err := video.FindFont(cfg.VideoFont)
	if err != nil {
		return video.Tools{}, fmt.Errorf("task type video: %w", err)
	}
	switch {
	case font == "":
		cfg.Logger.Warn("video: no font file found; ffmpeg's default font draws the title card and the watermark reads " + video.FallbackWatermark)
	case !cjk:
		cfg.Logger.Warn("video: the font cannot draw Chinese; the watermark reads "+video.FallbackWatermark, "font", font)
	}
	if !wants {
		cfg.Types = append(cfg.Types, policy.TypeVideo)
	}
	cfg.Logger.Info("video runner ready", "ffmpeg", ffmpeg, "font", font)
	return video.Tools{FFmpeg: ffmpeg, Font: font, CJK: cjk}, nil
}

// videoJob is the render of a journaled video task.
func (a *Agent) videoJob(t journal.Task) (video.Job, error) {
	if t.Video == "" {
		return video.Job{}, errors.New("video task without video parameters")
	}
	var p taskv1.VideoParams
	if err := protojson.Unmarshal([]byte(t.Video), &p); err != nil {
		return video.Job{}, fmt.Errorf("video parameters: %w", err)
	}
	prompt := p.GetActualPrompt()
	if prompt == "" {
		prompt = p.GetPrompt()
	}
	return video.Job{
		TaskID: t.ID, Type: p.GetType(), Model: p.GetModel(), Prompt: prompt,
		ImageURL: p.GetImageUrl(), Width: int(p.GetWidth()), Height: int(p.GetHeight()),
		Duration: int(p.GetDuration()), FrameNum: int(p.GetFrameNum()), Seed: int64(p.GetSeed()),
		Watermark: p.GetWatermark(),
		FFmpeg:    a.video.FFmpeg, Font: a.video.Font, WatermarkText: a.video.WatermarkText(),
		Realtime: a.cfg.VideoRealtime,
	}, nil
}

// videoError is the runner's one-line reason for a failed render.
func videoError(runDir string) string {
	b, err := os.ReadFile(filepath.Join(runDir, video.ErrorFile))
	if err != nil {
		return ""
	}
	return truncateUTF8(strings.TrimSpace(string(b)), 4096)
}

// uploadVideo uploads the rendered MP4 as the task's result object.
func (a *Agent) uploadVideo(ctx context.Context, t *journal.Task) error {
	path := filepath.Join(t.RunDir, video.OutputFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: the rendered video %s is gone", errResultLost, video.OutputFile)
	}
	if err != nil {
		return fmt.Errorf("video result: %w", err)
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	f.Close()
	if err != nil {
		return fmt.Errorf("video result: %w", err)
	}
	return a.putResult(ctx, t, video.ContentType, size, hex.EncodeToString(h.Sum(nil)),
		func() (io.ReadCloser, error) { return os.Open(path) })
}
