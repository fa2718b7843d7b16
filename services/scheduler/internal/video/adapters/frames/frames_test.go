package frames

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/image/bmp"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// opaque is a w×h image without transparency.
func opaque(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	return img
}

func encode(t *testing.T, f func(*bytes.Buffer) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// PNG returns an opaque PNG of w×h, for tests elsewhere too.
func pngOf(t *testing.T, img image.Image) []byte {
	return encode(t, func(b *bytes.Buffer) error { return png.Encode(b, img) })
}

func TestInspect(t *testing.T) {
	withAlpha := image.NewNRGBA(image.Rect(0, 0, 400, 400))
	withAlpha.Set(1, 1, color.NRGBA{R: 1, A: 0x80})
	palette := image.NewPaletted(image.Rect(0, 0, 400, 400), color.Palette{color.RGBA{A: 0xff}, color.NRGBA{}})
	webp, err := os.ReadFile("testdata/first.webp")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		data       []byte
		format     string
		w, h       int
		wantReason string // "" = accepted
	}{
		"png":                     {data: pngOf(t, opaque(640, 480)), format: "png", w: 640, h: 480},
		"jpeg":                    {data: encode(t, func(b *bytes.Buffer) error { return jpeg.Encode(b, opaque(800, 600), nil) }), format: "jpeg", w: 800, h: 600},
		"bmp":                     {data: encode(t, func(b *bytes.Buffer) error { return bmp.Encode(b, opaque(360, 2000)) }), format: "bmp", w: 360, h: 2000},
		"webp":                    {data: webp, format: "webp", w: 400, h: 380},
		"png with alpha":          {data: pngOf(t, withAlpha), wantReason: "alpha"},
		"png transparent palette": {data: pngOf(t, palette), wantReason: "alpha"},
		"gif":                     {data: encode(t, func(b *bytes.Buffer) error { return gif.Encode(b, opaque(400, 400), nil) }), wantReason: "gif"},
		"359 pixels wide":         {data: pngOf(t, opaque(359, 400)), wantReason: "359x400"},
		"2001 pixels high":        {data: pngOf(t, opaque(400, 2001)), wantReason: "400x2001"},
		"not an image":            {data: []byte("hello, world"), wantReason: "not an image"},
		"truncated png":           {data: pngOf(t, opaque(400, 400))[:100], wantReason: "decoded"},
		"over 10 MB":              {data: make([]byte, domain.MaxImageBytes+1), wantReason: "10 MB"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			info, err := Inspect(tc.data)
			if tc.wantReason != "" {
				var inv *domain.InvalidError
				if !errors.As(err, &inv) || inv.Field != "input.image" || !strings.Contains(inv.Reason, tc.wantReason) {
					t.Fatalf("Inspect = %v, want input.image refused (%s)", err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != tc.format || info.Width != tc.w || info.Height != tc.h || info.Bytes != len(tc.data) {
				t.Errorf("info = %+v", info)
			}
		})
	}
}

func dataURI(mime string, b []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
}

func TestLoadDataURI(t *testing.T) {
	l := NewLoader(Options{})
	img := pngOf(t, opaque(400, 400))
	// The declared MIME type is not trusted: the content is a PNG.
	b, info, err := l.Load(context.Background(), dataURI("image/jpeg", img))
	if err != nil || info.Format != domain.FormatPNG || !bytes.Equal(b, img) {
		t.Fatalf("Load = %+v, %v", info, err)
	}
	// Schemes are case-insensitive.
	if b, _, err := l.Load(context.Background(), "DATA:image/PNG;BASE64,"+base64.StdEncoding.EncodeToString(img)); err != nil || !bytes.Equal(b, img) {
		t.Fatalf("upper-case data URI: %v", err)
	}
	for name, uri := range map[string]string{
		"not base64":     "data:image/png;base64,@@@",
		"no base64 flag": "data:image/png," + base64.StdEncoding.EncodeToString(img),
		"not an image":   dataURI("text/plain", img),
		"no comma":       "data:image/png;base64",
		"ftp":            "ftp://example.com/a.png",
		"bare path":      "/etc/passwd",
		"too large":      "data:image/png;base64," + strings.Repeat("A", 15<<20),
	} {
		if _, _, err := l.Load(context.Background(), uri); !isInvalidImage(err) {
			t.Errorf("%s: Load = %v, want input.image refused", name, err)
		}
	}
}

func isInvalidImage(err error) bool {
	var inv *domain.InvalidError
	return errors.As(err, &inv) && inv.Field == "input.image"
}

func TestLoadURL(t *testing.T) {
	img := pngOf(t, opaque(500, 400))
	big := make([]byte, domain.MaxImageBytes+10)
	copy(big, img)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/first.png":
			_, _ = w.Write(img)
		case "/redirect":
			http.Redirect(w, r, "/first.png", http.StatusFound)
		case "/big":
			// No Content-Length: the cap applies while reading.
			w.Header().Set("Content-Type", "image/png")
			for off := 0; off < len(big); off += 1 << 20 {
				_, _ = w.Write(big[off:min(off+1<<20, len(big))])
				w.(http.Flusher).Flush()
			}
		case "/slow":
			<-release
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(release)

	// A generous limit for the downloads that must finish, even on a busy
	// machine; a short one for the server that never answers.
	l := NewLoader(Options{AllowPrivate: true, Timeout: 30 * time.Second})
	hasty := NewLoader(Options{AllowPrivate: true, Timeout: 300 * time.Millisecond})
	for _, path := range []string{"/first.png", "/redirect"} {
		b, info, err := l.Load(context.Background(), srv.URL+path)
		if err != nil || info.Width != 500 || !bytes.Equal(b, img) {
			t.Fatalf("%s: Load = %+v, %v", path, info, err)
		}
		// Schemes are case-insensitive.
		b, info, err = l.Load(context.Background(), "HTTP"+strings.TrimPrefix(srv.URL, "http")+path)
		if err != nil || info.Width != 500 || !bytes.Equal(b, img) {
			t.Fatalf("%s: Load = %+v, %v", path, info, err)
		}
	}
	for path, reason := range map[string]string{"/missing": "HTTP 404", "/big": "10 MB", "/slow": "in time"} {
		loader := l
		if path == "/slow" {
			loader = hasty
		}
		_, _, err := loader.Load(context.Background(), srv.URL+path)
		var inv *domain.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(inv.Reason, reason) {
			t.Errorf("%s: Load = %v, want %q", path, err, reason)
		}
	}

	// By default the test server's loopback address is refused.
	strict := NewLoader(Options{})
	_, _, err := strict.Load(context.Background(), srv.URL+"/first.png")
	var inv *domain.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(inv.Reason, "public") {
		t.Fatalf("loopback download: %v, want refused as not public", err)
	}
	// So are private and metadata addresses behind NAT64 and 6to4: the
	// connection is refused before it is tried.
	for _, u := range []string{"http://[64:ff9b::a9fe:a9fe]/a.png", "http://[2002:a00:1::]/a.png", "http://[::a00:1]/a.png"} {
		_, _, err := strict.Load(context.Background(), u)
		if !errors.As(err, &inv) || !strings.Contains(inv.Reason, "public") {
			t.Errorf("%s: %v, want refused as not public", u, err)
		}
	}
}
