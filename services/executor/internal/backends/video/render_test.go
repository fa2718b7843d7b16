package video

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/logbuf"
)

// job is a small, quick render.
func job(t testing.TB, typ string, w, h int) Job {
	t.Helper()
	font, cjk, err := FindFont("")
	if err != nil {
		t.Fatal(err)
	}
	j := Job{TaskID: "t1", Type: typ, Model: "wan2.2-t2v", Prompt: "A cat runs across the grass at dawn; 一只猫在草地上奔跑",
		Width: w, Height: h, Duration: 5, FrameNum: 81, Seed: 42, FFmpeg: tool(t, "ffmpeg"), Font: font}
	if cjk {
		j.WatermarkText = Watermark
	} else {
		j.WatermarkText = FallbackWatermark
	}
	return j
}

// imageServer serves the test PNG.
func imageServer(t testing.TB, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// percents returns the progress percentages in the render's progress
// output.
func percents(progress string) []int {
	var out []int
	for _, line := range strings.Split(progress, "\n") {
		rest, ok := strings.CutPrefix(line, progressPrefix)
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, " ")
		if v, err := strconv.Atoi(num); err == nil {
			out = append(out, v)
		}
	}
	return out
}

func render(t *testing.T, j Job) (string, []int) {
	t.Helper()
	dir := t.TempDir()
	var progress logbuf.Buffer
	var stderr bytes.Buffer
	if err := Render(context.Background(), j, dir, &progress, &stderr); err != nil {
		t.Fatalf("render: %v\nffmpeg: %s", err, stderr.String())
	}
	return filepath.Join(dir, OutputFile), percents(progress.String())
}

func TestRenderProducesTheRequestedVideo(t *testing.T) {
	img := testPNG(t, 400, 240)
	srv := imageServer(t, img)
	tests := []struct {
		name          string
		typ           string
		width, height int
		frameNum      int
		wantW, wantH  int
		wantFrames    int
	}{
		{name: "text to video", typ: TextToVideo, width: 192, height: 108, frameNum: 81, wantW: 192, wantH: 108, wantFrames: 81},
		{name: "image to video", typ: ImageToVideo, width: 200, height: 120, frameNum: 81, wantW: 200, wantH: 120, wantFrames: 81},
		{name: "odd size rounds down to even", typ: TextToVideo, width: 161, height: 97, frameNum: 121, wantW: 160, wantH: 96, wantFrames: 121},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := job(t, tc.typ, tc.width, tc.height)
			j.FrameNum = tc.frameNum
			if tc.typ == ImageToVideo {
				j.ImageURL = srv.URL + "/frame.png?X-Signature=secret"
			}
			path, percents := render(t, j)
			got := probe(t, path)
			if got.Codec != "h264" || got.PixFmt != "yuv420p" || got.Width != tc.wantW || got.Height != tc.wantH {
				t.Errorf("video is %s %s %dx%d, want h264 yuv420p %dx%d", got.Codec, got.PixFmt, got.Width, got.Height, tc.wantW, tc.wantH)
			}
			if got.Frames != tc.wantFrames || got.Duration < 4.9 || got.Duration > 5.1 {
				t.Errorf("video has %d frames over %.3fs, want %d frames over 5s", got.Frames, got.Duration, tc.wantFrames)
			}
			if !moovBeforeMdat(t, path) {
				t.Error("moov atom after mdat: not +faststart")
			}
			checkProgress(t, percents)
			if tc.typ != ImageToVideo {
				return
			}
			// The first frame is the input image: each quadrant keeps its
			// colour (the image's aspect ratio equals the video's here).
			frame := frameRGB(t, path, 0)
			w, h := got.Width, got.Height
			quads := []region{{0, 0, w / 2, h / 2}, {w / 2, 0, w, h / 2}, {0, h / 2, w / 2, h}, {w / 2, h / 2, w, h}}
			for i, q := range quads {
				// Stay clear of the quadrant edges, blurred by scaling and
				// chroma subsampling.
				inner := region{q.x0 + 8, q.y0 + 8, q.x1 - 8, q.y1 - 8}
				if d := colorDistance(meanColor(frame, w, inner), rgbOf(quadrantColors[i])); d > 20 {
					t.Errorf("first frame quadrant %d is %v, image has %v (distance %.1f)", i, meanColor(frame, w, inner), quadrantColors[i], d)
				}
			}
			// And the camera moves: the last frame is zoomed in.
			last := frameRGB(t, path, got.Frames-1)
			if meanAbsDiff(frame, last, w, region{0, 0, w, h}) < 1 {
				t.Error("first and last frames are the same: no camera motion")
			}
		})
	}
}

// checkProgress wants reports that never go back and end at 100.
func checkProgress(t *testing.T, percents []int) {
	t.Helper()
	if len(percents) < 3 || percents[0] != 0 || percents[len(percents)-1] != 100 {
		t.Fatalf("progress %v: want 0 first, 100 last and reports in between", percents)
	}
	for i := 1; i < len(percents); i++ {
		if percents[i] < percents[i-1] {
			t.Fatalf("progress went back: %v", percents)
		}
	}
}

func TestWatermarkMarksTheBottomRightOnly(t *testing.T) {
	srv := imageServer(t, testPNG(t, 400, 240))
	for _, typ := range []string{TextToVideo, ImageToVideo} {
		t.Run(typ, func(t *testing.T) {
			j := job(t, typ, 320, 180)
			j.ImageURL = srv.URL + "/frame.png"
			plain, _ := render(t, j)
			j.Watermark = true
			marked, _ := render(t, j)
			const w, h = 320, 180
			a, b := frameRGB(t, plain, 0), frameRGB(t, marked, 0)
			// The mark is about h/16 high, a sixth of the width wide, inset
			// by h/30: this corner holds it and little else.
			corner := region{w * 4 / 5, h * 4 / 5, w, h}
			if d := meanAbsDiff(a, b, w, corner); d < 8 {
				t.Errorf("bottom-right region differs by %.1f on average: no visible watermark", d)
			}
			for _, r := range []region{{0, 0, w / 2, h / 2}, {0, h * 3 / 4, w / 4, h}} {
				if d := meanAbsDiff(a, b, w, r); d > 1 {
					t.Errorf("region %v differs by %.1f: the watermark is not confined to the corner", r, d)
				}
			}
		})
	}
}

// A run directory whose path needs every level of filter escaping still
// works: paths reach ffmpeg's filters escaped, never raw.
func TestFilterPathsAreEscaped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), `it's a:dir,[with];odd\chars`)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	j := job(t, TextToVideo, 128, 72)
	j.Prompt = `quotes ' " and : , ; [ ] \ % {} %{pts} $(id)`
	var progress, stderr bytes.Buffer
	if err := Render(context.Background(), j, dir, &progress, &stderr); err != nil {
		t.Fatalf("render in %q: %v\n%s", dir, err, stderr.String())
	}
	if got := probe(t, filepath.Join(dir, OutputFile)); got.Width != 128 {
		t.Fatalf("video %+v", got)
	}
	// The card wraps the prompt over several line files; together they
	// hold it unchanged.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "line-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		words = append(words, strings.Fields(string(b))...)
	}
	if got, want := strings.Join(words, " "), strings.Join(strings.Fields(j.Prompt), " "); got != want {
		t.Fatalf("line files hold %q, want %q: the text must reach ffmpeg unchanged", got, want)
	}
}

func TestFirstFrameDownloadFailures(t *testing.T) {
	img := testPNG(t, 64, 64)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok.png", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) })
	mux.HandleFunc("/missing.png", http.NotFound)
	mux.HandleFunc("/big.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(2000))
		_, _ = w.Write(bytes.Repeat([]byte{0}, 2000))
	})
	mux.HandleFunc("/big-chunked.png", func(w http.ResponseWriter, r *http.Request) {
		for range 4 {
			_, _ = w.Write(bytes.Repeat([]byte{0}, 600))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/slow.png", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/page.html", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html><body>not an image</body></html>"))
	})
	mux.HandleFunc("/empty.png", func(w http.ResponseWriter, r *http.Request) {})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/frame.png"
	ln.Close()

	tests := []struct {
		name    string
		url     string
		wantErr string
	}{
		{name: "not found", url: srv.URL + "/missing.png?sig=SECRET", wantErr: "answered 404 Not Found"},
		{name: "oversized by content-length", url: srv.URL + "/big.png?sig=SECRET", wantErr: "is 2000 bytes, more than the 1024-byte limit"},
		{name: "oversized while reading", url: srv.URL + "/big-chunked.png?sig=SECRET", wantErr: "is more than the 1024-byte limit"},
		{name: "unreachable", url: closed + "?sig=SECRET", wantErr: "cannot download http://" + ln.Addr().String() + "/frame.png: dial tcp"},
		{name: "too slow", url: srv.URL + "/slow.png?sig=SECRET", wantErr: "did not answer within 300ms"},
		{name: "not an image", url: srv.URL + "/page.html?sig=SECRET", wantErr: "is not a JPEG, PNG, BMP or WEBP image (it looks like text/html"},
		{name: "empty", url: srv.URL + "/empty.png", wantErr: "is empty"},
		{name: "not http", url: "file:///etc/passwd", wantErr: "image_url must be an http or https URL"},
		{name: "no url", url: "", wantErr: "image_url must be an http or https URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := job(t, ImageToVideo, 64, 64)
			j.ImageURL, j.ImageLimit, j.ImageTimeout = tc.url, 1024, 300*time.Millisecond
			dir := t.TempDir()
			var progress, stderr bytes.Buffer
			err := Render(context.Background(), j, dir, &progress, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error %q leaks the URL's signature", err)
			}
			if _, err := os.Stat(filepath.Join(dir, OutputFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed render left %s", OutputFile)
			}
		})
	}
	t.Run("a good image after all", func(t *testing.T) {
		j := job(t, ImageToVideo, 64, 64)
		j.ImageURL, j.ImageLimit = srv.URL+"/ok.png", 1<<20
		render(t, j)
	})
}

func TestInvalidJobs(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Job)
		wantErr string
	}{
		{name: "too small", mod: func(j *Job) { j.Width = 8 }, wantErr: "video size 8x72 is outside 16 to 4096 pixels"},
		{name: "too long", mod: func(j *Job) { j.Duration = 61 }, wantErr: "video duration 61 s is more than 60 s"},
		{name: "unknown type", mod: func(j *Job) { j.Type = "video_to_video" }, wantErr: `video type "video_to_video" is neither`},
		{name: "empty prompt", mod: func(j *Job) { j.Prompt = "  " }, wantErr: "text_to_video needs a prompt"},
		{name: "no ffmpeg", mod: func(j *Job) { j.FFmpeg = "" }, wantErr: "no ffmpeg configured"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := job(t, TextToVideo, 128, 72)
			tc.mod(&j)
			var progress, stderr bytes.Buffer
			if err := Render(context.Background(), j, t.TempDir(), &progress, &stderr); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// ffmpegChildren lists the pids of this process's ffmpeg children.
func ffmpegChildren(t *testing.T) []int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < 0 {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if s[open+1:close] == "ffmpeg" && len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestCancelStopsFFmpeg(t *testing.T) {
	j := job(t, TextToVideo, 128, 72)
	j.Duration, j.FrameNum, j.Realtime = 30, 480, true // 30 s at playback speed
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var progress, stderr logbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- Render(ctx, j, dir, &progress, &stderr) }()

	var pids []int
	deadline := time.Now().Add(20 * time.Second)
	for {
		ps := percents(progress.String())
		pids = ffmpegChildren(t)
		if len(ps) > 0 && ps[len(ps)-1] >= 2 && len(pids) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ffmpeg not rendering: progress %v, ffmpeg children %v", ps, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("render after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("render did not return after cancel")
	}
	if err := syscall.Kill(pids[0], 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("ffmpeg %d still exists after cancel (kill 0: %v)", pids[0], err)
	}
	if _, err := os.Stat(filepath.Join(dir, OutputFile)); !errors.Is(err, os.ErrNotExist) {
		t.Error("a cancelled render left a finished-looking video")
	}
	if _, err := os.Stat(tempOutput(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Error("a cancelled render left its partial output")
	}
}

func TestMainRecordsTheFailure(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	dir := t.TempDir()
	j := job(t, ImageToVideo, 64, 64)
	j.ImageURL = srv.URL + "/gone.png"
	if err := Save(dir, j); err != nil {
		t.Fatal(err)
	}
	if code := Main([]string{"-dir", dir}); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	b, err := os.ReadFile(filepath.Join(dir, ErrorFile))
	if err != nil || !strings.Contains(string(b), "answered 404 Not Found") {
		t.Fatalf("%s = %q (%v)", ErrorFile, b, err)
	}
	if code := Main([]string{"-dir", filepath.Join(dir, "nowhere")}); code != 1 {
		t.Errorf("missing job: exit code %d, want 1", code)
	}
	if code := Main(nil); code != 2 {
		t.Errorf("no -dir: exit code %d, want 2", code)
	}
}

// TestGeometryKeepsTheModelsFrameCount: a frame_num of the duration × 16
// + 1 renders that many frames (the first, then one per 1/16 s), as the
// model does; a count the frame rate cannot reach is not stretched into a
// longer video.
func TestGeometryKeepsTheModelsFrameCount(t *testing.T) {
	for _, tc := range []struct {
		duration, frameNum int
		fps, frames        int
	}{
		{5, 81, 16, 81},
		{10, 161, 16, 161},
		{5, 80, 16, 80},
		{5, 40, 8, 40},
		{5, 1000, 30, 150}, // past 30 fps: 30 fps for 5 s
		{5, 10, 8, 40},     // below 8 fps: 8 fps for 5 s
		{5, 0, DefaultFPS, DefaultFPS * 5},
	} {
		g, err := geometryOf(Job{Width: 64, Height: 64, Duration: tc.duration, FrameNum: tc.frameNum})
		if err != nil {
			t.Fatal(err)
		}
		if g.fps != tc.fps || g.frames != tc.frames {
			t.Errorf("%d s, frame_num %d: %d fps, %d frames; want %d fps, %d frames", tc.duration, tc.frameNum, g.fps, g.frames, tc.fps, tc.frames)
		}
	}
}
