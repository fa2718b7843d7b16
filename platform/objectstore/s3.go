package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3Config configures S3.
type S3Config struct {
	Endpoint string // host[:port]; "" = s3.amazonaws.com (always over TLS)
	Bucket   string
	// Region of the bucket. Set it: when empty, minio-go asks the service
	// for the bucket's location before the first request (and presigning).
	Region string
	Prefix string // prepended to every key, e.g. "task-results/"
	// AccessKey and SecretKey are static credentials. Leave both empty to
	// take them from the environment (AWS_ACCESS_KEY_ID…, MINIO_ACCESS_KEY…)
	// or, failing that, from the EC2/ECS/EKS instance role.
	AccessKey string
	SecretKey string
	UseSSL    bool
}

// String describes the configuration without the secret key.
func (c S3Config) String() string {
	return fmt.Sprintf("S3Config{Endpoint:%q Bucket:%q Region:%q Prefix:%q AccessKey:%q SecretKey:%s UseSSL:%t}",
		c.Endpoint, c.Bucket, c.Region, c.Prefix, c.AccessKey, redactString(c.SecretKey), c.UseSSL)
}

// GoString keeps %#v from printing the secret key too.
func (c S3Config) GoString() string { return "objectstore." + c.String() }

// LogValue makes slog print the configuration without the secret key.
func (c S3Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint),
		slog.String("bucket", c.Bucket),
		slog.String("region", c.Region),
		slog.String("prefix", c.Prefix),
		slog.String("access_key", c.AccessKey),
		slog.String("secret_key", redactString(c.SecretKey)),
		slog.Bool("use_ssl", c.UseSSL),
	)
}

func redactString(s string) string {
	if s == "" {
		return "[unset]"
	}
	return "[REDACTED]"
}

// S3 is a Store in an S3-compatible bucket.
//
// Put needs the SHA-256 before it sends the request (metadata travels in
// the request headers), so it reads the body twice: directly when the body
// is seekable and its size known, otherwise by first copying it to memory
// (up to spoolMemoryMax) or to a temporary file in os.TempDir, which then
// needs room for the whole object.
type S3 struct {
	client   *minio.Client
	bucket   string
	prefix   string
	endpoint string // for error messages
}

var _ Store = (*S3)(nil)

const (
	defaultS3Endpoint = "s3.amazonaws.com"
	// spoolMemoryMax is the largest body of unknown or unseekable origin
	// that Put buffers in memory; larger ones go to a temporary file.
	spoolMemoryMax = 8 << 20
	// sha256MetaKey is the user metadata key (x-amz-meta-sha256).
	sha256MetaKey = "sha256"
)

// NewS3 connects to an S3-compatible service and verifies the bucket exists
// (clear error otherwise), so a typo fails at startup rather than at the
// first task result.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("objectstore: S3Config.Bucket %q: %w", cfg.Bucket, err)
	}
	if cfg.Prefix != "" {
		if err := ValidateKey(cfg.Prefix + "x"); err != nil {
			return nil, fmt.Errorf("objectstore: S3Config.Prefix %q must be a valid key start: %w", cfg.Prefix, err)
		}
	}
	endpoint, secure := cfg.Endpoint, cfg.UseSSL
	if endpoint == "" {
		endpoint, secure = defaultS3Endpoint, true
	}
	var creds *credentials.Credentials
	switch {
	case cfg.AccessKey != "" && cfg.SecretKey != "":
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	case cfg.AccessKey == "" && cfg.SecretKey == "":
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.IAM{},
		})
	default:
		return nil, errors.New("objectstore: S3Config needs both AccessKey and SecretKey, or neither")
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:  creds,
		Secure: secure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("objectstore: S3 client for %s: %w", endpoint, err)
	}
	s := &S3{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix, endpoint: endpoint}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("objectstore: checking bucket %q at %s: %w", cfg.Bucket, endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("objectstore: bucket %q does not exist at %s (create it first; the store never creates buckets)", cfg.Bucket, endpoint)
	}
	return s, nil
}

// objectKey validates key and returns the bucket key. The prefix can push a
// valid key over S3's 1024-byte limit, so the sum is checked too.
func (s *S3) objectKey(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	k := s.prefix + key
	if len(k) > MaxKeyLen {
		return "", fmt.Errorf("%w: %d bytes with prefix %q, longer than %d", ErrInvalidKey, len(k), s.prefix, MaxKeyLen)
	}
	return k, nil
}

// mapErr turns S3's "no such key" into ErrNotFound; everything else, a
// missing bucket included (a configuration problem, not a missing object),
// is wrapped as is.
func (s *S3) mapErr(op, key string, err error) error {
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fmt.Errorf("objectstore: s3 %s %s: %w", op, key, err)
}

func (s *S3) info(key string, oi minio.ObjectInfo) Info {
	info := Info{Key: key, Size: oi.Size, ContentType: oi.ContentType, ModTime: oi.LastModified}
	for k, v := range oi.UserMetadata {
		if strings.EqualFold(k, sha256MetaKey) && isHexSHA256(v) {
			info.SHA256 = v
		}
	}
	return info
}

func isHexSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && s == strings.ToLower(s)
}

// Put implements Store. S3 replaces objects atomically, so readers see the
// old or the new object. The body is hashed before upload (see S3) and
// checked against size on the way, so a wrong size fails before anything
// is sent.
func (s *S3) Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) (Info, error) {
	objKey, err := s.objectKey(key)
	if err != nil {
		return Info{}, err
	}
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return Info{}, err
	}
	if size < -1 {
		return Info{}, fmt.Errorf("objectstore: put %s: invalid size %d", key, size)
	}
	src, n, sum, cleanup, err := hashBody(ctx, body, size)
	if err != nil {
		return Info{}, fmt.Errorf("objectstore: put %s: %w", key, err)
	}
	defer cleanup()
	up, err := s.client.PutObject(ctx, s.bucket, objKey, src, n, minio.PutObjectOptions{
		ContentType:  ct,
		UserMetadata: map[string]string{sha256MetaKey: sum},
		// Over plain HTTP minio-go signs the payload in aws-chunked
		// streaming form, but for an empty body it then sends
		// Transfer-Encoding: chunked without Content-Length, which S3
		// refuses (MissingContentLength). An empty payload has nothing to
		// protect, so sign it as UNSIGNED-PAYLOAD instead.
		DisableContentSha256: n == 0,
	})
	if err != nil {
		return Info{}, s.mapErr("put", key, err)
	}
	mod := up.LastModified
	if mod.IsZero() {
		// A single PUT's response has no Last-Modified; this is close.
		mod = time.Now()
	}
	return Info{Key: key, Size: n, ContentType: ct, SHA256: sum, ModTime: mod}, nil
}

// maxSingleCopy is the largest object S3 copies in one CopyObject call.
const maxSingleCopy = 5 << 30

// Copy implements Store. The service copies the object itself
// (CopyObject, or UploadPartCopy past 5 GiB), so no byte passes through
// this process. The metadata is given again rather than copied, because a
// multipart copy would not carry the content type over; the copy is made
// only of the version the metadata was read from (its ETag), so the two
// agree.
func (s *S3) Copy(ctx context.Context, from, to string) (Info, error) {
	src, err := s.objectKey(from)
	if err != nil {
		return Info{}, err
	}
	dst, err := s.objectKey(to)
	if err != nil {
		return Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, src, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.mapErr("copy", from, err)
	}
	info := s.info(to, oi)
	meta := map[string]string{"Content-Type": info.ContentType}
	if info.SHA256 != "" {
		meta[sha256MetaKey] = info.SHA256
	}
	dstOpts := minio.CopyDestOptions{Bucket: s.bucket, Object: dst, ReplaceMetadata: true, UserMetadata: meta}
	srcOpts := minio.CopySrcOptions{Bucket: s.bucket, Object: src, MatchETag: oi.ETag}
	var up minio.UploadInfo
	if oi.Size <= maxSingleCopy {
		up, err = s.client.CopyObject(ctx, dstOpts, srcOpts)
	} else {
		up, err = s.client.ComposeObject(ctx, dstOpts, srcOpts)
	}
	if err != nil {
		return Info{}, s.mapErr("copy", from, err)
	}
	info.ModTime = up.LastModified
	if info.ModTime.IsZero() {
		info.ModTime = time.Now()
	}
	return info, nil
}

// hashBody computes the SHA-256 and length of body and returns a reader
// positioned to upload the same bytes again, plus a cleanup to call after
// the upload.
func hashBody(ctx context.Context, body io.Reader, size int64) (io.Reader, int64, string, func(), error) {
	noop := func() {}
	hash := sha256.New()
	var in io.Reader = ctxReader{ctx: ctx, r: body}
	if size >= 0 {
		in = newExactReader(in, size)
	}

	// Seekable with known size: hash in place, then rewind. With a ReaderAt
	// the upload goes through a SectionReader, because minio-go uses ReadAt
	// with offsets from 0 and the body may not start at 0.
	if seeker, ok := body.(io.ReadSeeker); ok && size >= 0 {
		start, err := seeker.Seek(0, io.SeekCurrent)
		if err == nil {
			if _, err := io.Copy(hash, in); err != nil {
				return nil, 0, "", noop, err
			}
			sum := hex.EncodeToString(hash.Sum(nil))
			if ra, ok := body.(io.ReaderAt); ok {
				return io.NewSectionReader(ra, start, size), size, sum, noop, nil
			}
			if _, err := seeker.Seek(start, io.SeekStart); err != nil {
				return nil, 0, "", noop, err
			}
			return io.LimitReader(seeker, size), size, sum, noop, nil
		}
	}

	// Otherwise spool: to memory while small, then to a temporary file.
	var mem bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&mem, hash), io.LimitReader(in, spoolMemoryMax+1))
	if err != nil {
		return nil, 0, "", noop, err
	}
	if n <= spoolMemoryMax {
		return bytes.NewReader(mem.Bytes()), n, hex.EncodeToString(hash.Sum(nil)), noop, nil
	}
	tmp, err := os.CreateTemp("", "objectstore-s3-put-*")
	if err != nil {
		return nil, 0, "", noop, fmt.Errorf("spooling body: %w", err)
	}
	cleanup := func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}
	if _, err := tmp.Write(mem.Bytes()); err != nil {
		cleanup()
		return nil, 0, "", noop, fmt.Errorf("spooling body: %w", err)
	}
	rest, err := io.Copy(io.MultiWriter(tmp, hash), in)
	if err != nil {
		cleanup()
		return nil, 0, "", noop, fmt.Errorf("spooling body: %w", err)
	}
	n += rest
	return io.NewSectionReader(tmp, 0, n), n, hex.EncodeToString(hash.Sum(nil)), cleanup, nil
}

// Open implements Store with a single GET whose response headers give the
// Info, so content and description always belong to the same version.
// (minio.Client.GetObject would HEAD first and rely on the server honouring
// If-Match on the following GET.) The body is bound to ctx: cancel it only
// after reading.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	objKey, err := s.objectKey(key)
	if err != nil {
		return nil, Info{}, err
	}
	body, oi, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, objKey, minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, s.mapErr("get", key, err)
	}
	return body, s.info(key, oi), nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	objKey, err := s.objectKey(key)
	if err != nil {
		return Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, objKey, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.mapErr("stat", key, err)
	}
	return s.info(key, oi), nil
}

// Delete implements Store. S3 answers 204 for a missing key too.
func (s *S3) Delete(ctx context.Context, key string) error {
	objKey, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, objKey, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(s.mapErr("delete", key, err), ErrNotFound) {
			return nil
		}
		return s.mapErr("delete", key, err)
	}
	return nil
}

// PresignGet implements Store with a SigV4 presigned URL; signing is local
// (no request) when S3Config.Region is set.
func (s *S3) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	objKey, err := s.objectKey(key)
	if err != nil {
		return "", err
	}
	if err := checkTTL(ttl); err != nil {
		return "", err
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, objKey, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("objectstore: presign get %s: %w", key, err)
	}
	return u.String(), nil
}

// checksumSHA256Header carries a PUT's sha256 (base64) for S3 to check.
const checksumSHA256Header = "X-Amz-Checksum-Sha256"

// PresignPut implements Store. Content-Type and Content-Length are signed
// headers of the URL, so S3 refuses an upload whose type or length differs;
// so is the body's sha256, when given.
// The client must send the returned headers (with net/http, set
// Request.ContentLength rather than the header). Objects uploaded this way
// have no SHA-256 metadata of ours (Stat reports none); with sha256 given,
// S3 has checked the body against it.
func (s *S3) PresignPut(ctx context.Context, key string, ttl time.Duration, size int64, contentType, sha string) (string, map[string]string, error) {
	objKey, err := s.objectKey(key)
	if err != nil {
		return "", nil, err
	}
	if err := checkSHA256(sha); err != nil {
		return "", nil, fmt.Errorf("objectstore: presign put %s: %w", key, err)
	}
	if err := checkTTL(ttl); err != nil {
		return "", nil, err
	}
	if size < 0 {
		return "", nil, fmt.Errorf("objectstore: presign put %s: size %d is negative", key, size)
	}
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return "", nil, err
	}
	length := strconv.FormatInt(size, 10)
	signed := http.Header{"Content-Type": {ct}, "Content-Length": {length}}
	headers := map[string]string{"Content-Type": ct, "Content-Length": length}
	if sha != "" {
		// A signed checksum header: S3 refuses a body whose sha256 is not
		// this one (BadDigest), and a request without the header or with
		// another value fails the signature.
		raw, _ := hex.DecodeString(sha)
		sum := base64.StdEncoding.EncodeToString(raw)
		signed.Set(checksumSHA256Header, sum)
		headers[checksumSHA256Header] = sum
	}
	u, err := s.client.PresignHeader(ctx, http.MethodPut, s.bucket, objKey, ttl, nil, signed)
	if err != nil {
		return "", nil, fmt.Errorf("objectstore: presign put %s: %w", key, err)
	}
	return u.String(), headers, nil
}

// PresignPutUpTo implements Store. Only Content-Type is a signed header:
// a SigV4 presigned PUT cannot bound the body's length, so S3 accepts any
// size up to its single-PUT limit and maxSize is not enforced here.
func (s *S3) PresignPutUpTo(ctx context.Context, key string, ttl time.Duration, maxSize int64, contentType string) (string, map[string]string, error) {
	objKey, err := s.objectKey(key)
	if err != nil {
		return "", nil, err
	}
	if err := checkTTL(ttl); err != nil {
		return "", nil, err
	}
	if maxSize < 0 {
		return "", nil, fmt.Errorf("objectstore: presign put %s: maximum size %d is negative", key, maxSize)
	}
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return "", nil, err
	}
	u, err := s.client.PresignHeader(ctx, http.MethodPut, s.bucket, objKey, ttl, nil, http.Header{"Content-Type": {ct}})
	if err != nil {
		return "", nil, fmt.Errorf("objectstore: presign put %s: %w", key, err)
	}
	return u.String(), map[string]string{"Content-Type": ct}, nil
}
