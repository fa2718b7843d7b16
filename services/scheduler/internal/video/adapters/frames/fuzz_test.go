package frames

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// FuzzInspectImage feeds arbitrary bytes to the first-frame inspection:
// nothing panics, and an accepted image has a supported format and a size
// within the documented limits.
func FuzzInspectImage(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*"))
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
		}
	}
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Add([]byte("\xff\xd8\xff\xe0"))
	f.Add([]byte("RIFF\x00\x00\x00\x00WEBPVP8 "))
	f.Add([]byte("BM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Inspect(b)
		if err != nil {
			return
		}
		if domain.CheckImage(info) == nil && (info.Width < 360 || info.Height < 360 || info.Width > 2000 || info.Height > 2000) {
			t.Fatalf("accepted image %+v outside 360-2000 px", info)
		}
	})
}

// FuzzDataURI feeds arbitrary strings to the data: URI decoder and then
// the inspection, as the video API does with input.image.
func FuzzDataURI(f *testing.F) {
	webp, _ := os.ReadFile(filepath.Join("testdata", "first.webp"))
	f.Add("image/webp;base64," + base64.StdEncoding.EncodeToString(webp))
	f.Add("image/jpeg;base64,/9j/4AAQ")
	f.Add("text/plain;base64,aGk=")
	f.Add("image/png,raw")
	f.Add("image/png;base64,%%%")
	f.Add("")
	f.Fuzz(func(t *testing.T, uri string) {
		b, err := decodeDataURI("data:" + uri)
		if err != nil {
			return
		}
		if len(b) > domain.MaxImageBytes+2 {
			t.Fatalf("decoded %d bytes, over the cap", len(b))
		}
		_, _ = Inspect(b)
	})
}
