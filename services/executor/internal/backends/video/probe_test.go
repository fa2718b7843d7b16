package video

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// Test helpers that look at a rendered MP4 with ffprobe and ffmpeg, tools
// independent of the code under test's argument building.

func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (apt-get install -y ffmpeg): %v", name, err)
	}
	return p
}

type mp4Info struct {
	Codec, PixFmt string
	Width, Height int
	Frames        int
	Duration      float64
	FPS           float64
}

func probe(t testing.TB, path string) mp4Info {
	t.Helper()
	out, err := exec.Command(tool(t, "ffprobe"), "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,pix_fmt,width,height,nb_read_frames,avg_frame_rate:format=duration",
		"-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var r struct {
		Streams []struct {
			CodecName    string `json:"codec_name"`
			PixFmt       string `json:"pix_fmt"`
			Width        int    `json:"width"`
			Height       int    `json:"height"`
			NbReadFrames string `json:"nb_read_frames"`
			AvgFrameRate string `json:"avg_frame_rate"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Streams) != 1 {
		t.Fatalf("ffprobe output %s: %v", out, err)
	}
	s := r.Streams[0]
	info := mp4Info{Codec: s.CodecName, PixFmt: s.PixFmt, Width: s.Width, Height: s.Height}
	info.Frames, _ = strconv.Atoi(s.NbReadFrames)
	info.Duration, _ = strconv.ParseFloat(r.Format.Duration, 64)
	var num, den float64
	if n, err := parseRatio(s.AvgFrameRate); err == nil {
		num, den = n[0], n[1]
		info.FPS = num / den
	}
	return info
}

func parseRatio(s string) ([2]float64, error) {
	for i := range s {
		if s[i] == '/' {
			a, err1 := strconv.ParseFloat(s[:i], 64)
			b, err2 := strconv.ParseFloat(s[i+1:], 64)
			if err1 != nil || err2 != nil || b == 0 {
				break
			}
			return [2]float64{a, b}, nil
		}
	}
	return [2]float64{}, strconv.ErrSyntax
}

// frameRGB decodes frame n (0-based) of the video as packed RGB24.
func frameRGB(t testing.TB, path string, n int) []byte {
	t.Helper()
	out, err := exec.Command(tool(t, "ffmpeg"), "-v", "error", "-i", path,
		"-vf", "select=eq(n\\,"+strconv.Itoa(n)+")", "-frames:v", "1",
		"-f", "rawvideo", "-pix_fmt", "rgb24", "-").Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("decode frame %d of %s: %v", n, path, err)
	}
	return out
}

// region is a rectangle of a frame, in pixels.
type region struct{ x0, y0, x1, y1 int }

// meanColor averages a region of an RGB24 frame of width w.
func meanColor(rgb []byte, w int, r region) [3]float64 {
	var sum [3]float64
	n := 0
	for y := r.y0; y < r.y1; y++ {
		for x := r.x0; x < r.x1; x++ {
			i := (y*w + x) * 3
			for c := range 3 {
				sum[c] += float64(rgb[i+c])
			}
			n++
		}
	}
	for c := range 3 {
		sum[c] /= float64(n)
	}
	return sum
}

// meanAbsDiff compares a region of two RGB24 frames of width w.
func meanAbsDiff(a, b []byte, w int, r region) float64 {
	var sum float64
	n := 0
	for y := r.y0; y < r.y1; y++ {
		for x := r.x0; x < r.x1; x++ {
			for c := range 3 {
				i := (y*w+x)*3 + c
				sum += math.Abs(float64(a[i]) - float64(b[i]))
				n++
			}
		}
	}
	return sum / float64(n)
}

func colorDistance(a, b [3]float64) float64 {
	return math.Sqrt((a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2]))
}

// testPNG draws a w×h image: four coloured quadrants, so that the first
// frame's quadrants can be compared with the image's.
func testPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := quadrantColors[0]
			if x >= w/2 {
				c = quadrantColors[1]
			}
			if y >= h/2 {
				c = quadrantColors[2]
				if x >= w/2 {
					c = quadrantColors[3]
				}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var quadrantColors = [4]color.RGBA{
	{R: 200, G: 40, B: 40, A: 255},  // top left
	{R: 40, G: 180, B: 60, A: 255},  // top right
	{R: 40, G: 60, B: 200, A: 255},  // bottom left
	{R: 230, G: 210, B: 50, A: 255}, // bottom right
}

func rgbOf(c color.RGBA) [3]float64 { return [3]float64{float64(c.R), float64(c.G), float64(c.B)} }

// moovBeforeMdat reports whether the MP4's index (moov) precedes its media
// data (mdat), which is what +faststart does.
func moovBeforeMdat(t testing.TB, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off+8 <= len(b); {
		size := int(binary.BigEndian.Uint32(b[off:]))
		switch string(b[off+4 : off+8]) {
		case "moov":
			return true
		case "mdat":
			return false
		}
		if size < 8 {
			break
		}
		off += size
	}
	t.Fatalf("%s has neither moov nor mdat", path)
	return false
}
