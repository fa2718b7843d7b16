package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	_ "image/gif" // recognised so a GIF is refused by name, not as "not an image"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/webp"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// Inspect decodes b and checks it against the first-frame limits. The size
// is read from the header first, so an oversized image is refused before
// its pixels are decoded; the full decode then proves the data is whole.
func Inspect(b []byte) (domain.ImageInfo, error) {
	if len(b) > domain.MaxImageBytes {
		return domain.ImageInfo{}, domain.ImageTooLarge(len(b))
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if errors.Is(err, image.ErrFormat) {
		return domain.ImageInfo{}, domain.ImageUnusable("is not an image in a supported format (%s)", domain.ImageTypes)
	}
	if err != nil {
		return domain.ImageInfo{}, domain.ImageUnusable("could not be decoded: %v", err)
	}
	info := domain.ImageInfo{Format: format, Width: cfg.Width, Height: cfg.Height, Bytes: len(b)}
	if err := domain.CheckImage(info); err != nil {
		return info, err
	}
	if _, _, err := image.Decode(bytes.NewReader(b)); err != nil {
		return info, domain.ImageUnusable("could not be decoded: %v", err)
	}
	info.HasAlpha = format == domain.FormatPNG && pngHasAlpha(b)
	return info, domain.CheckImage(info)
}

// pngHasAlpha reads a PNG's chunks up to its image data: colour types 4
// (grey + alpha) and 6 (RGBA) carry an alpha channel, and a tRNS chunk makes
// a grey, RGB or palette image transparent. The decoded colour model cannot
// tell: Go decodes an opaque RGB PNG to RGBA.
func pngHasAlpha(b []byte) bool {
	const sigLen = 8
	for off := sigLen; off+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[off:]))
		typ := string(b[off+4 : off+8])
		data := off + 8
		if n < 0 || data+n > len(b) {
			return false // malformed; the decoder has already accepted the image
		}
		switch typ {
		case "IHDR":
			if n >= 10 && (b[data+9] == 4 || b[data+9] == 6) {
				return true
			}
		case "tRNS":
			return true
		case "IDAT":
			return false
		}
		off = data + n + 4 // data and CRC
	}
	return false
}
