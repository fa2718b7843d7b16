// Package objectstore keeps large task results (and other blobs) outside the
// database, behind one small interface with two implementations:
//
//   - FS, a directory on local disk for the embedded development setup. Its
//     presigned URLs are HMAC-signed and served by FS.Handler, which the
//     gateway mounts at the path of FSConfig.BaseURL.
//   - S3, any S3-compatible service (AWS S3, MinIO) through minio-go, for
//     production. Its presigned URLs are ordinary SigV4 presigned URLs that
//     the service itself checks.
//
// Executors never hold store credentials: the control plane hands them a
// presigned PUT URL for the result and consumers a presigned GET URL, so
// both implementations bind a PUT URL to one key, one exact size and one
// content type, and expire every URL.
//
// Keys are restricted (see ValidateKey) so that the same key is valid and
// means the same object on a filesystem and in a bucket, and so that no key
// can name anything outside the store.
package objectstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"
)

// Info describes a stored object.
type Info struct {
	Key         string
	Size        int64
	ContentType string
	// SHA256 is the hex SHA-256 of the content, when known: FS always; S3
	// when the object was written by S3.Put (which stores it as user
	// metadata). Objects uploaded through a presigned S3 PUT URL have none,
	// because the URL is signed before anyone knows the content.
	SHA256  string
	ModTime time.Time
}

// ErrNotFound is returned (wrapped) by Open and Stat for a missing object.
var ErrNotFound = errors.New("objectstore: not found")

// ErrInvalidKey is returned wrapped with the reason when a key breaks the
// rules of ValidateKey.
var ErrInvalidKey = errors.New("objectstore: invalid key")

// Store keeps objects by key. Keys are relative paths of [A-Za-z0-9._-]
// segments separated by "/", 1–1024 bytes, no "..", no empty segment, no
// leading "/".
type Store interface {
	// Put stores body under key (size -1 = unknown; otherwise exactly size
	// bytes or an error and nothing stored). Writes are atomic: readers see
	// the old object or the whole new one.
	Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) (Info, error)
	// Copy stores the object under from again under to, replacing what
	// to held, as atomically as Put; ErrNotFound if from does not exist.
	// The copy has from's content, size, content type and SHA-256. Its
	// ModTime is the store's: S3 gives the time of the copy, FS keeps
	// from's (the copy shares its file). Neither passes the bytes
	// through this process when it can avoid it.
	Copy(ctx context.Context, from, to string) (Info, error)
	// Open returns the object's content and description; ErrNotFound if
	// it does not exist. The caller must Close the reader, and keep ctx
	// alive until done reading: S3 streams the body under ctx.
	Open(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes the object; ErrNotFound if it does not exist.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// PresignGet returns a URL anyone can GET until ttl passes.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
	// PresignPut returns a URL (and the headers the client must send) that
	// accepts one PUT of exactly size bytes with contentType until ttl
	// passes. "One PUT" means the URL is bound to that key, size and
	// content type, and, when sha256 (hex) is given, to that body: a PUT
	// of other bytes is refused and leaves the object as it was (FS checks
	// the body before it replaces anything; S3 checks the signed
	// x-amz-checksum-sha256 header). Neither implementation can stop the
	// holder from repeating the same upload before the URL expires; with
	// sha256 a repeat can only write the same bytes again.
	PresignPut(ctx context.Context, key string, ttl time.Duration, size int64, contentType, sha256 string) (url string, headers map[string]string, err error)
	// PresignPutUpTo is PresignPut for a client that does not know the
	// size when the URL is made (a program's output): the URL accepts a
	// PUT of any size with contentType. FS refuses more than maxSize
	// bytes; S3 cannot bound a presigned PUT's size, so there maxSize is
	// only the S3 service's own limit for one PUT (5 GiB).
	PresignPutUpTo(ctx context.Context, key string, ttl time.Duration, maxSize int64, contentType string) (url string, headers map[string]string, err error)
}

const (
	// DefaultContentType is stored when Put or PresignPut is given "".
	// Both implementations normalise to it so that Info.ContentType and the
	// headers a presigned PUT requires are the same everywhere.
	DefaultContentType = "application/octet-stream"

	// MaxPresignTTL is the longest lifetime of a presigned URL. It is the
	// SigV4 limit (7 days), applied to FS too so a configuration that works
	// in development does not fail in production.
	MaxPresignTTL = 7 * 24 * time.Hour

	// maxContentTypeLen bounds the content type so it fits FS's fixed-size
	// object header and an S3 request header.
	maxContentTypeLen = 256
)

// normalizeContentType returns the content type to store, or an error if ct
// is not a well-formed media type. Control characters are refused because ct
// travels in HTTP headers and in the FS signature's newline-separated input.
func normalizeContentType(ct string) (string, error) {
	if ct == "" {
		return DefaultContentType, nil
	}
	if len(ct) > maxContentTypeLen {
		return "", fmt.Errorf("objectstore: content type longer than %d bytes", maxContentTypeLen)
	}
	for i := 0; i < len(ct); i++ {
		if c := ct[i]; c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("objectstore: content type %q has a non-printable or non-ASCII byte", ct)
		}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("objectstore: content type %q: %w", ct, err)
	}
	if typ, sub, ok := strings.Cut(mt, "/"); !ok || typ == "" || sub == "" {
		return "", fmt.Errorf("objectstore: content type %q is not type/subtype", ct)
	}
	return ct, nil
}

// checkTTL refuses lifetimes that S3 would refuse: under one second (the
// expiry is carried in whole seconds) or over MaxPresignTTL.
func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl > MaxPresignTTL {
		return fmt.Errorf("objectstore: presign ttl %v out of range [1s, %v]", ttl, MaxPresignTTL)
	}
	return nil
}

// checkSHA256 accepts "" (no digest) or 64 lower-case hex digits.
func checkSHA256(sha string) error {
	if sha == "" {
		return nil
	}
	if len(sha) != 64 || strings.Trim(sha, "0123456789abcdef") != "" {
		return fmt.Errorf("sha256 %q is not 64 lower-case hex digits", sha)
	}
	return nil
}

// errSizeMismatch is wrapped by Put when the body is not exactly the
// declared size; the FS handler maps it to 400.
var errSizeMismatch = errors.New("objectstore: body size does not match declared size")

// exactReader passes through exactly n bytes of r and fails if r holds more
// or fewer. The check for "more" happens when the n-th byte is delivered, not
// on a later Read, because consumers such as minio-go stop reading once they
// have the declared size and would otherwise never notice the surplus; the
// failed Read aborts their upload so nothing is stored.
type exactReader struct {
	r    io.Reader
	left int64
	err  error
}

func newExactReader(r io.Reader, n int64) *exactReader { return &exactReader{r: r, left: n} }

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.left == 0 {
		return 0, e.probeEOF()
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if e.left == 0 {
		// Withhold the last bytes until we know the body ends here.
		if perr := e.probeEOF(); perr != io.EOF {
			return 0, perr
		}
		return n, nil
	}
	if err == io.EOF {
		e.err = fmt.Errorf("%w: %d bytes short", errSizeMismatch, e.left)
		return n, e.err
	}
	if err != nil {
		e.err = err
	}
	return n, err
}

// probeEOF reads one more byte; io.EOF means the body is exactly the
// declared size. Readers may return (0, nil), so it retries a few times.
func (e *exactReader) probeEOF() error {
	var b [1]byte
	for range 100 {
		n, err := e.r.Read(b[:])
		if n > 0 {
			e.err = fmt.Errorf("%w: more bytes than declared", errSizeMismatch)
			return e.err
		}
		if err == io.EOF {
			e.err = io.EOF
			return io.EOF
		}
		if err != nil {
			e.err = err
			return err
		}
	}
	e.err = io.ErrNoProgress
	return e.err
}
