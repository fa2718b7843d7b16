package frames

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/safehttp"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// Options configure a Loader.
type Options struct {
	// Timeout bounds a download, connection to last byte (default 15s).
	Timeout time.Duration
	// AllowPrivate lets downloads reach non-public addresses (tests, a
	// development machine). Off by default.
	AllowPrivate bool
}

// Loader fetches first frames.
type Loader struct {
	client *http.Client
}

// maxRedirects bounds how many redirects a download follows.
const maxRedirects = 5

// NewLoader returns a loader. Its downloads reach public addresses only
// (platform/safehttp: checked on the address dialed, redirects included)
// unless o.AllowPrivate.
func NewLoader(o Options) *Loader {
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Second
	}
	return &Loader{client: safehttp.NewClient(safehttp.Options{Policy: safehttp.Policy{AllowAll: o.AllowPrivate},
		Timeout: o.Timeout, MaxRedirects: maxRedirects})}
}

// Load returns the first frame named by image (an http(s) URL or a data:
// URI) and what it is. Every refusal is an *domain.InvalidError on
// input.image; nothing else can fail.
func (l *Loader) Load(ctx context.Context, image string) ([]byte, domain.ImageInfo, error) {
	var b []byte
	var err error
	// Schemes are case-insensitive (RFC 3986 §3.1): DATA: and HTTPS: too.
	switch {
	case hasScheme(image, "data:"):
		b, err = decodeDataURI(image)
	case hasScheme(image, "http://") || hasScheme(image, "https://"):
		b, err = l.download(ctx, image)
	default:
		err = domain.ImageUnusable("must be an http(s) URL or data:{MIME_type};base64,{data}")
	}
	if err != nil {
		return nil, domain.ImageInfo{}, err
	}
	info, err := Inspect(b)
	if err != nil {
		return nil, info, err
	}
	return b, info, nil
}

// hasScheme reports whether s begins with prefix, a scheme and what
// follows it, in any case.
func hasScheme(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// decodeDataURI reads data:{MIME_type};base64,{data}. The MIME type must be
// an image type but is otherwise ignored: the content decides.
func decodeDataURI(s string) ([]byte, error) {
	header, data, ok := strings.Cut(s[len("data:"):], ",")
	mime, enc, _ := strings.Cut(header, ";")
	if !ok || !strings.EqualFold(enc, "base64") || !strings.HasPrefix(strings.ToLower(mime), "image/") {
		return nil, domain.ImageUnusable("is not data:{MIME_type};base64,{data} with an image MIME type")
	}
	if base64.StdEncoding.DecodedLen(len(data)) > domain.MaxImageBytes+2 {
		return nil, domain.ImageTooLarge(base64.StdEncoding.DecodedLen(len(data)))
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, domain.ImageUnusable("has invalid base64 data")
	}
	return b, nil
}

func (l *Loader) download(ctx context.Context, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, domain.ImageUnusable("is not a valid URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, domain.ImageUnusable("is not a valid URL")
	}
	resp, err := l.client.Do(req)
	if err != nil {
		if errors.Is(err, safehttp.ErrRefused) {
			return nil, domain.ImageUnusable("URL does not point to a public address")
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, domain.ImageUnusable("could not be downloaded in time")
		}
		return nil, domain.ImageUnusable("could not be downloaded")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, domain.ImageUnusable("could not be downloaded: HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > domain.MaxImageBytes {
		return nil, domain.ImageTooLarge(int(resp.ContentLength))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, domain.MaxImageBytes+1))
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, domain.ImageUnusable("could not be downloaded in time")
		}
		return nil, domain.ImageUnusable("could not be downloaded")
	}
	if len(b) > domain.MaxImageBytes {
		return nil, domain.ImageTooLarge(len(b))
	}
	return b, nil
}
