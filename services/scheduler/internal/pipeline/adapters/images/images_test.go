package images

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"strings"
	"testing"

	"golang.org/x/image/bmp"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

func picture() image.Image {
	m := image.NewRGBA(image.Rect(0, 0, 8, 6))
	for x := range 8 {
		m.Set(x, x%6, color.RGBA{R: 200, A: 255})
	}
	return m
}

func encoded(t *testing.T, enc func(*bytes.Buffer, image.Image) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := enc(&b, picture()); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngSized is a valid PNG whose header claims w×h pixels (with its CRC
// fixed), so the size check meets it before any pixel is decoded.
func pngSized(t *testing.T, w, h uint32) []byte {
	t.Helper()
	b := encoded(t, func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) })
	const ihdr = 8 // signature; then length, "IHDR", data, CRC
	binary.BigEndian.PutUint32(b[ihdr+8:], w)
	binary.BigEndian.PutUint32(b[ihdr+12:], h)
	binary.BigEndian.PutUint32(b[ihdr+8+13:], crc32.ChecksumIEEE(b[ihdr+4:ihdr+8+13]))
	return b
}

func TestCheckAcceptsWholeImagesOfTheFourFormats(t *testing.T) {
	webp, err := os.ReadFile("../../../video/adapters/frames/testdata/first.webp")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"png":  encoded(t, func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }),
		"jpeg": encoded(t, func(b *bytes.Buffer, m image.Image) error { return jpeg.Encode(b, m, nil) }),
		"bmp":  encoded(t, func(b *bytes.Buffer, m image.Image) error { return bmp.Encode(b, m) }),
		"webp": webp,
	} {
		if err := Check(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Files that only start like an image are refused, each with its reason
// and naming the file field.
func TestCheckRefusesWhatIsNoWholeImage(t *testing.T) {
	whole := encoded(t, func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) })
	brokenData := bytes.Clone(whole)
	idat := bytes.Index(brokenData, []byte("IDAT"))
	copy(brokenData[idat+4:], "not zlib")
	for _, tt := range []struct {
		name string
		b    []byte
		want string
	}{
		{"text that starts BM", []byte("BMW is a car, not an image at all.\n"), "is not a JPEG, PNG, BMP or WEBP image"},
		{"a PNG signature and junk", append([]byte("\x89PNG\r\n\x1a\n"), "junk junk junk junk"...), "is not a whole png image"},
		{"a WEBP header and junk", append([]byte("RIFF\x20\x00\x00\x00WEBP"), "junk junk junk junk"...), "is not a whole webp image"},
		{"JPEG magic and junk", append([]byte{0xFF, 0xD8, 0xFF}, "junk junk junk junk"...), "is not a whole jpeg image"},
		{"a PNG cut short", whole[:len(whole)-20], "is not a whole png image"},
		{"a PNG whose pixel data is broken", brokenData, "is not a whole png image"},
		{"plain text", []byte("hello"), "is not a JPEG, PNG, BMP or WEBP image"},
		{"a GIF", encoded(t, func(b *bytes.Buffer, m image.Image) error { return gif.Encode(b, m, nil) }), "is a gif image"},
		{"too wide", pngSized(t, MaxSide+1, 1), "at most 16384 a side"},
		{"too many pixels", pngSized(t, 10000, 5000), "and 40000000 in all"},
	} {
		err := Check(tt.b)
		var invalid *domain.InvalidError
		if !errors.As(err, &invalid) || invalid.Field != "file" || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an invalid file that %s", tt.name, err, tt.want)
		}
	}
}
