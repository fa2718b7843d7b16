package video

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Tools are what the runner needs on this machine, found once when the
// agent starts so that a missing tool is reported then, not by failing
// tasks later.
type Tools struct {
	// FFmpeg is the absolute path of ffmpeg.
	FFmpeg string
	// Font is a font file for the title card and the watermark; empty when
	// none was found (fontconfig's default is used).
	Font string
	// CJK is set when Font can draw Chinese (the prompt, "AI生成").
	CJK bool
}

// WatermarkText is the mark the tools can draw legibly.
func (t Tools) WatermarkText() string {
	if t.CJK {
		return Watermark
	}
	return FallbackWatermark
}

// ErrNoFFmpeg is returned by FindFFmpeg when ffmpeg is not installed.
var ErrNoFFmpeg = errors.New("ffmpeg not found (install it, e.g. `apt-get install -y ffmpeg`)")

// FindFFmpeg resolves the ffmpeg executable: name as given ("" means
// "ffmpeg" on PATH).
func FindFFmpeg(name string) (string, error) {
	if name == "" {
		name = "ffmpeg"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoFFmpeg, err)
	}
	return p, nil
}

// knownCJKFonts are checked when fontconfig finds nothing: the files of the
// Debian packages fonts-noto-cjk and fonts-wqy-zenhei/microhei.
var knownCJKFonts = []string{
	"/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
	"/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc",
	"/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
	"/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
	"/usr/share/fonts/truetype/arphic/uming.ttc",
}

// FindFont picks the font: the configured file when given (it must exist),
// else a CJK-capable font from fontconfig (`fc-list :lang=zh`) or a known
// path. Without one, Font is empty and CJK false: the caller logs that
// Chinese text cannot be drawn.
func FindFont(configured string) (font string, cjk bool, err error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", false, fmt.Errorf("video font: %w", err)
		}
		return configured, true, nil
	}
	if p := fcListChinese(); p != "" {
		return p, true, nil
	}
	for _, p := range knownCJKFonts {
		if _, err := os.Stat(p); err == nil {
			return p, true, nil
		}
	}
	return "", false, nil
}

// fcListChinese asks fontconfig for a font covering Chinese, preferring a
// regular sans face.
func fcListChinese() string {
	fc, err := exec.LookPath("fc-list")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, fc, ":lang=zh", "file").Output()
	if err != nil {
		return ""
	}
	var files []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), ":")); f != "" {
			files = append(files, f)
		}
	}
	for _, f := range files {
		if strings.Contains(f, "Regular") || strings.Contains(f, "zenhei") || strings.Contains(f, "microhei") {
			return f
		}
	}
	if len(files) > 0 {
		return files[0]
	}
	return ""
}
