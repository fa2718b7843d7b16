// Package images judges a reference image upload by decoding it whole
// (docs/api/pipeline.md, "Uploads"): its first bytes only say what it
// claims to be, and a file that merely starts like an image would reach
// the BIE stage's toolchain as calibration input.
package images

import (
	"bytes"
	"errors"
	"image"
	_ "image/gif" // recognised so a GIF is refused by name, not as "not an image"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/webp"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// Bounds of a reference image in pixels: far above any calibration set's
// (a 4K frame has 8.3 million), and low enough that decoding one holds at
// most 160 MB. The size is read from the header first, so a larger image
// is refused before its pixels are decoded.
const (
	MaxSide   = 16384
	MaxPixels = 40_000_000
)

// Check decodes b as a JPEG, PNG, BMP or WEBP image within the bounds, and
// says why it is none.
func Check(b []byte) error {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if errors.Is(err, image.ErrFormat) {
		// A file that starts as one of the four (say "RIFF....WEBP" with
		// no VP8 chunk) is refused as that format's broken image, as a
		// PNG signature before junk is: what it claims, then why not.
		// Not for "BM": two letters that start much text ("BMW …") are
		// no claim to be a bitmap.
		if claimed := domain.ImageFormat(b); claimed != "" && claimed != "bmp" {
			return domain.Invalid("file", "is not a whole %s image: its %s header is not followed by an image", claimed, claimed)
		}
		return domain.Invalid("file", "is not a JPEG, PNG, BMP or WEBP image")
	}
	if err != nil {
		return domain.Invalid("file", "is not a whole %s image: %v", format, err)
	}
	switch format {
	case "jpeg", "png", "bmp", "webp":
	default:
		return domain.UnacceptedImage(format)
	}
	w, h := cfg.Width, cfg.Height
	switch {
	case w <= 0 || h <= 0:
		return domain.Invalid("file", "is a %s image of %d×%d pixels; it has none", format, w, h)
	case w > MaxSide || h > MaxSide || w*h > MaxPixels:
		return domain.Invalid("file", "is a %s image of %d×%d pixels; at most %d a side and %d in all", format, w, h, MaxSide, MaxPixels)
	}
	if _, _, err := image.Decode(bytes.NewReader(b)); err != nil {
		return domain.Invalid("file", "is not a whole %s image: %v", format, err)
	}
	return nil
}
