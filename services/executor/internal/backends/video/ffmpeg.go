package video

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// geometry is what every render derives from a Job.
type geometry struct {
	width, height int
	fps, frames   int
	duration      int // seconds
}

// geometryOf fixes the output's size and timing. H.264 in yuv420p needs
// even dimensions, so an odd width or height is rounded down by one pixel.
// The frame rate is FrameNum/Duration (Wan2.2: 81 frames in 5 s, 16 fps),
// kept within 8–30 fps. The video has FrameNum frames when that is the
// duration's frames and at most a second more (the task's duration × 16
// + 1: the first frame, then one per 1/16 s to the end), as the model
// renders them; otherwise fps × duration.
func geometryOf(j Job) (geometry, error) {
	g := geometry{width: j.Width &^ 1, height: j.Height &^ 1, duration: j.Duration}
	if g.width < 16 || g.height < 16 || g.width > 4096 || g.height > 4096 {
		return g, fmt.Errorf("video size %dx%d is outside 16 to 4096 pixels", j.Width, j.Height)
	}
	if g.duration <= 0 {
		g.duration = DefaultDuration
	}
	if g.duration > 60 {
		return g, fmt.Errorf("video duration %d s is more than 60 s", g.duration)
	}
	g.fps = DefaultFPS
	if j.FrameNum > 0 {
		g.fps = min(max(int(math.Round(float64(j.FrameNum)/float64(g.duration))), 8), 30)
	}
	g.frames = g.fps * g.duration
	if j.FrameNum >= g.frames && j.FrameNum <= g.frames+g.fps {
		g.frames = j.FrameNum
	}
	return g, nil
}

// length is how long the video plays: frames at fps.
func (g geometry) length() time.Duration {
	return time.Duration(g.frames) * time.Second / time.Duration(g.fps)
}

// escapeFilterValue escapes a value for an ffmpeg filter option inside a
// filtergraph: first the option level (\ ' :), then the filtergraph level
// (\ ' [ ] , ;), as the ffmpeg-filters manual prescribes. Only values the
// runner controls pass through it (file paths, expressions); user text
// never does.
func escapeFilterValue(s string) string {
	s = escapeChars(s, `\':`)
	return escapeChars(s, `\'[],;`)
}

func escapeChars(s, special string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(special, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// filter renders one filter with its options in order.
func filter(name string, opts ...[2]string) string {
	parts := make([]string, 0, len(opts))
	for _, o := range opts {
		parts = append(parts, o[0]+"="+escapeFilterValue(o[1]))
	}
	if len(parts) == 0 {
		return name
	}
	return name + "=" + strings.Join(parts, ":")
}

func opt(k, v string) [2]string { return [2]string{k, v} }
func num(n int) string          { return strconv.Itoa(n) }

// palette picks the title card's two gradient colours from the request's
// seed: a hue
// that walks the colour wheel by the golden angle from seed to seed, dark
// enough for white text.
func palette(seed int64) (c0, c1 string) {
	h := math.Mod(float64(seed%360+360)*137.508, 360)
	return hsv(h, 0.60, 0.55), hsv(math.Mod(h+45, 360), 0.70, 0.22)
}

// hsv returns 0xRRGGBB for a hue in degrees, saturation and value in 0..1.
func hsv(h, s, v float64) string {
	c := v * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := v - c
	var r, g, b float64
	switch {
	case h < 60:
		r, g = c, x
	case h < 120:
		r, g = x, c
	case h < 180:
		g, b = c, x
	case h < 240:
		g, b = x, c
	case h < 300:
		r, b = x, c
	default:
		r, b = c, x
	}
	byteOf := func(f float64) int { return int(math.Round((f + m) * 255)) }
	return fmt.Sprintf("0x%02X%02X%02X", byteOf(r), byteOf(g), byteOf(b))
}

// inputs of a render, in the run directory.
type inputs struct {
	// image is the downloaded first frame and imageDemuxer the ffmpeg
	// demuxer for its detected format (image_to_video).
	image, imageDemuxer string
	// lines are the files holding the title card's lines (text_to_video).
	lines []string
	card  card
	// output is where ffmpeg writes (renamed to OutputFile on success).
	output string
}

// ffmpegArgs builds ffmpeg's argument vector (without argv[0]).
func ffmpegArgs(j Job, g geometry, in inputs) []string {
	args := []string{"-hide_banner", "-nostdin", "-loglevel", "error", "-y",
		"-progress", "pipe:1", "-nostats", "-stats_period", "0.5"}
	var chain []string
	switch j.Type {
	case ImageToVideo:
		// Only the file protocol and the detected image demuxer: a crafted
		// "image" (a playlist, a concat list) cannot make ffmpeg open
		// anything else.
		args = append(args, "-protocol_whitelist", "file", "-f", in.imageDemuxer, "-i", in.image)
		// One input frame becomes every output frame: zoompan turns it into
		// `frames` frames, zooming from 1 (the image itself, covering the
		// frame) to 1.08 toward the centre.
		chain = append(chain,
			filter("scale", opt("w", num(g.width)), opt("h", num(g.height)),
				opt("force_original_aspect_ratio", "increase"), opt("flags", "lanczos")),
			filter("crop", opt("w", num(g.width)), opt("h", num(g.height))),
			"setsar=1",
			filter("zoompan",
				opt("z", fmt.Sprintf("1+0.08*on/%d", g.frames)),
				opt("x", "iw/2-(iw/zoom/2)"), opt("y", "ih/2-(ih/zoom/2)"),
				opt("d", num(g.frames)), opt("s", fmt.Sprintf("%dx%d", g.width, g.height)), opt("fps", num(g.fps))))
	default:
		c0, c1 := palette(j.Seed)
		args = append(args, "-f", "lavfi", "-i", filter("gradients",
			opt("s", fmt.Sprintf("%dx%d", g.width, g.height)), opt("r", num(g.fps)), opt("d", num(g.duration+1)), // -frames:v ends it
			opt("c0", c0), opt("c1", c1), opt("n", "2"),
			opt("x0", "0"), opt("y0", "0"), opt("x1", num(g.width)), opt("y1", num(g.height)),
			opt("speed", "0.006"),
			// Without a seed the filter draws one at random and the same
			// task would render differently each time.
			opt("seed", strconv.FormatUint(uint64(uint32(j.Seed)), 10))))
		// One drawtext per line, so every line is centred; the block drifts
		// up and down by 2 % of the height over the clip.
		top := (g.height - len(in.lines)*in.card.lineHeight) / 2
		drift := max(g.height/50, 1)
		for i, file := range in.lines {
			y := fmt.Sprintf("%d+%d*sin(2*PI*t/%d)", top+i*in.card.lineHeight, drift, g.duration)
			chain = append(chain, drawtext(j.Font,
				opt("textfile", file), opt("expansion", "none"),
				opt("fontsize", num(in.card.fontSize)), opt("fontcolor", "white"),
				opt("shadowcolor", "black@0.6"), opt("shadowx", "2"), opt("shadowy", "2"),
				opt("x", "(w-text_w)/2"), opt("y", y)))
		}
	}
	if j.Watermark {
		text := j.WatermarkText
		if text == "" {
			text = Watermark
		}
		size := max(g.height/16, 10)
		margin := max(g.height/30, 4)
		chain = append(chain, drawtext(j.Font,
			opt("text", text), opt("expansion", "none"),
			opt("fontsize", num(size)), opt("fontcolor", "white@0.9"),
			opt("box", "1"), opt("boxcolor", "black@0.35"), opt("boxborderw", num(max(size/5, 2))),
			opt("x", fmt.Sprintf("w-text_w-%d", margin)), opt("y", fmt.Sprintf("h-text_h-%d", margin))))
	}
	chain = append(chain, "format=yuv420p")
	if j.Realtime {
		chain = append(chain, "realtime")
	}
	return append(args,
		"-vf", strings.Join(chain, ","),
		"-frames:v", num(g.frames), "-r", num(g.fps),
		"-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p",
		"-movflags", "+faststart", "-an", "-f", "mp4", in.output)
}

func drawtext(font string, opts ...[2]string) string {
	if font != "" {
		opts = append([][2]string{opt("fontfile", font)}, opts...)
	}
	return filter("drawtext", opts...)
}

// tempOutput is ffmpeg's output name: a failed or interrupted render never
// leaves a file that looks finished.
func tempOutput(dir string) string { return filepath.Join(dir, ".rendering.mp4") }
