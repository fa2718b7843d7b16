// Package video is the executor's stand-in for a video-generation model on
// machines without a GPU model server: it turns a video task
// (taskv1.VideoParams, docs/api/video.md#the-video-task) into a real H.264
// MP4 with ffmpeg.
//
//   - image_to_video: the first frame is the task's input image, downloaded
//     from its signed URL (size cap, timeout, format check), scaled to cover
//     the requested size, then a slow zoom toward the centre.
//   - text_to_video: a title card with the prompt, wrapped to the frame, on
//     a slowly turning gradient whose colours follow the request's seed.
//   - watermark: "AI生成" bottom-right, in a CJK-capable font when the
//     machine has one.
//
// It runs as the task's process: the agent starts `<exe> executor shim
// video -dir <run dir>` through the shim like any other task, so timeout,
// cancel and preemption (SIGTERM, grace, SIGKILL to the process group) reach
// ffmpeg, which runs in the same group. ffmpeg gets an argument vector, and
// user text reaches it only through files (drawtext textfile= with
// expansion=none), never inside a filter string. Progress comes from
// ffmpeg's -progress output and is printed as ::progress:: lines, which the
// shim already reports. The result is <run dir>/video.mp4; a failure is
// explained in <run dir>/video.error.
package video

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Files in the attempt's run directory.
const (
	// JobFile holds the Job (written by the agent, read by the runner).
	JobFile = "video.json"
	// OutputFile is the finished MP4; it exists only after a successful
	// render (ffmpeg writes to a temporary name first).
	OutputFile = "video.mp4"
	// ErrorFile explains a failed render in one line.
	ErrorFile = "video.error"
	// ContentType of OutputFile.
	ContentType = "video/mp4"
)

// Task types of VideoParams.Type.
const (
	TextToVideo  = "text_to_video"
	ImageToVideo = "image_to_video"
)

// Defaults for a Job's zero fields.
const (
	DefaultDuration     = 5
	DefaultFPS          = 16 // Wan2.2's native rate: 81 frames ≈ 5 s
	DefaultImageLimit   = 10 << 20
	DefaultImageTimeout = 60 * time.Second
	// Watermark is the text the video API prescribes for the mark
	// (docs/api/video.md#the-request).
	Watermark = "AI生成"
	// FallbackWatermark is drawn instead when no CJK-capable font exists:
	// legible Latin text rather than boxes.
	FallbackWatermark = "AI-generated"
)

// Job is one render: the task's video parameters plus the agent's tools.
type Job struct {
	TaskID string `json:"task_id"`
	// Type is TextToVideo or ImageToVideo.
	Type  string `json:"type"`
	Model string `json:"model"`
	// Prompt is the text of the title card: the rewritten prompt when there
	// is one, else the user's.
	Prompt   string `json:"prompt"`
	ImageURL string `json:"image_url,omitempty"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	// Duration in seconds (default 5).
	Duration int `json:"duration"`
	// FrameNum is the model's frame count; with Duration it sets the frame
	// rate (default 16 fps).
	FrameNum  int   `json:"frame_num"`
	Seed      int64 `json:"seed"`
	Watermark bool  `json:"watermark"`

	// FFmpeg is the ffmpeg executable.
	FFmpeg string `json:"ffmpeg"`
	// Font is a font file for the prompt and the watermark; empty uses
	// fontconfig's default.
	Font string `json:"font,omitempty"`
	// WatermarkText is Watermark, or FallbackWatermark without a CJK font.
	WatermarkText string `json:"watermark_text,omitempty"`
	// ImageLimit caps the first frame's size in bytes (default 10 MiB, the
	// video API's own limit).
	ImageLimit int64 `json:"image_limit,omitempty"`
	// ImageTimeout bounds the first frame's download (default 60 s).
	ImageTimeout time.Duration `json:"image_timeout,omitempty"`
	// Realtime renders no faster than playback, the way a model takes its
	// time; for demonstrations of live progress.
	Realtime bool `json:"realtime,omitempty"`
}

// Save writes the job into the run directory (mode 0600: it holds a signed
// URL).
func Save(dir string, j Job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, JobFile), b, 0o600)
}

// Load reads the job of a run directory.
func Load(dir string) (Job, error) {
	var j Job
	b, err := os.ReadFile(filepath.Join(dir, JobFile))
	if err != nil {
		return j, err
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return j, fmt.Errorf("parse %s: %w", JobFile, err)
	}
	return j, nil
}
