package video

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// imageDemuxers maps the detected content type of a first frame to the
// ffmpeg demuxer that reads it: the formats the video API accepts
// (docs/api/video.md#the-request).
var imageDemuxers = map[string]string{
	"image/jpeg": "jpeg_pipe",
	"image/png":  "png_pipe",
	"image/bmp":  "bmp_pipe",
	"image/webp": "webp_pipe",
}

// redact shows a URL without its query: a signed URL's signature is a
// credential and never goes into an error or a log.
func redact(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

// downloadImage fetches the first frame into dst and returns the ffmpeg
// demuxer for it. Every failure is a clear one-line error: not http(s), not
// reachable, not answering 200, too large, timed out, not an image.
func downloadImage(ctx context.Context, raw string, limit int64, timeout time.Duration, dst string) (string, error) {
	if limit <= 0 {
		limit = DefaultImageLimit
	}
	if timeout <= 0 {
		timeout = DefaultImageTimeout
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("first frame: image_url must be an http or https URL")
	}
	where := redact(u)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return "", fmt.Errorf("first frame: %s: %w", where, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fetchError(ctx, where, timeout, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("first frame: %s answered %s", where, resp.Status)
	}
	if resp.ContentLength > limit {
		return "", fmt.Errorf("first frame: %s is %d bytes, more than the %d-byte limit", where, resp.ContentLength, limit)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("first frame: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return "", fetchError(ctx, where, timeout, err)
	case n > limit:
		return "", fmt.Errorf("first frame: %s is more than the %d-byte limit", where, limit)
	case n == 0:
		return "", fmt.Errorf("first frame: %s is empty", where)
	}
	head := make([]byte, 512)
	f, err = os.Open(dst)
	if err != nil {
		return "", fmt.Errorf("first frame: %w", err)
	}
	m, _ := io.ReadFull(f, head)
	f.Close()
	kind := http.DetectContentType(head[:m])
	demuxer, ok := imageDemuxers[kind]
	if !ok {
		return "", fmt.Errorf("first frame: %s is not a JPEG, PNG, BMP or WEBP image (it looks like %s)", where, kind)
	}
	return demuxer, nil
}

// fetchError says why a download failed without repeating the URL's query.
func fetchError(ctx context.Context, where string, timeout time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("first frame: %s did not answer within %s", where, timeout)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("first frame: download cancelled: %w", ctx.Err())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its message repeats the whole URL
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("first frame: %s did not answer within %s", where, timeout)
	}
	return fmt.Errorf("first frame: cannot download %s: %v", where, err)
}
