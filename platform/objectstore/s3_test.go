package objectstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

const (
	fakeBucket    = "results"
	fakeRegion    = "us-east-1"
	fakeAccessKey = "AKIDTASKMESHTEST"
	fakeSecretKey = "fake-secret-key-for-tests-only"
)

// fakeS3 is gofakes3 with its in-memory backend behind httptest: a real
// S3-protocol server in process. gofakes3 ignores signatures, so presigned
// requests go through presignVerifier first, which checks them the way S3
// does (SigV4 query signing, expiry, signed headers).
type fakeS3 struct {
	srv     *httptest.Server
	backend *s3mem.Backend
	// skew is added to the verifier's clock, to expire URLs without waiting.
	skew atomic.Int64
	// presigned counts requests that carried a presigned signature.
	presigned atomic.Int64
	// parts counts multipart part uploads decoded by decodeChunkedParts.
	parts atomic.Int64
}

func newFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	f := &fakeS3{backend: s3mem.New()}
	if err := f.backend.CreateBucket(fakeBucket); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(f.backend)
	f.srv = httptest.NewServer(f.presignVerifier(f.decodeChunkedParts(t, faker.Server())))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeS3) config(prefix string) objectstore.S3Config {
	u, _ := url.Parse(f.srv.URL)
	return objectstore.S3Config{
		Endpoint:  u.Host,
		Bucket:    fakeBucket,
		Region:    fakeRegion,
		Prefix:    prefix,
		AccessKey: fakeAccessKey,
		SecretKey: fakeSecretKey,
	}
}

func (f *fakeS3) newStore(t *testing.T, prefix string) *objectstore.S3 {
	t.Helper()
	s, err := objectstore.NewS3(context.Background(), f.config(prefix))
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return s
}

// decodeChunkedParts works around a gofakes3 gap: it decodes aws-chunked
// (streaming SigV4) bodies of single PUTs but stores multipart *part*
// uploads verbatim, chunk headers included. minio-go streams parts that way
// over plain HTTP, so parts are decoded here first, as S3 would.
func (f *fakeS3) decodeChunkedParts(t *testing.T, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method != http.MethodPut || q.Get("partNumber") == "" || q.Get("uploadId") == "" ||
			r.Header.Get("X-Amz-Content-Sha256") != "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" {
			next.ServeHTTP(w, r)
			return
		}
		decoded, err := decodeAWSChunked(bufio.NewReader(r.Body))
		if err != nil || strconv.Itoa(len(decoded)) != r.Header.Get("X-Amz-Decoded-Content-Length") {
			t.Errorf("bad aws-chunked part body (%d bytes decoded, header %s): %v", len(decoded), r.Header.Get("X-Amz-Decoded-Content-Length"), err)
			http.Error(w, "bad aws-chunked body", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(decoded))
		r.ContentLength = int64(len(decoded))
		r.Header.Set("Content-Length", strconv.Itoa(len(decoded)))
		r.Header.Del("Content-Encoding")
		r.Header.Del("X-Amz-Decoded-Content-Length")
		r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		f.parts.Add(1)
		next.ServeHTTP(w, r)
	})
}

// decodeAWSChunked reads "<hex size>;chunk-signature=<sig>\r\n<data>\r\n"
// chunks up to the final zero-size one.
func decodeAWSChunked(br *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		sizeHex, _, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ";")
		n, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("chunk size %q: %w", sizeHex, err)
		}
		if n == 0 {
			return out, nil
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(br, chunk); err != nil {
			return nil, err
		}
		if string(chunk[n:]) != "\r\n" {
			return nil, errors.New("chunk not followed by CRLF")
		}
		out = append(out, chunk[:n]...)
	}
}

// presignVerifier checks SigV4 query-string signatures, written from the AWS
// documentation independently of minio-go. Requests without X-Amz-Signature
// (the client's own header-signed calls) pass through unchecked.
func (f *fakeS3) presignVerifier(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("X-Amz-Signature") == "" {
			next.ServeHTTP(w, r)
			return
		}
		f.presigned.Add(1)
		if code, msg := f.checkPresigned(r, q); code != "" {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<Error><Code>%s</Code><Message>%s</Message></Error>", code, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *fakeS3) checkPresigned(r *http.Request, q url.Values) (code, msg string) {
	const denied = "AccessDenied"
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
		return denied, "unsupported algorithm"
	}
	amzDate := q.Get("X-Amz-Date")
	signedAt, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return denied, "bad X-Amz-Date"
	}
	expires, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || expires < 1 || expires > 604800 {
		return denied, "bad X-Amz-Expires"
	}
	now := time.Now().Add(time.Duration(f.skew.Load()))
	if now.Before(signedAt.Add(-15*time.Minute)) || !now.Before(signedAt.Add(time.Duration(expires)*time.Second)) {
		return denied, "Request has expired"
	}
	cred := strings.Split(q.Get("X-Amz-Credential"), "/")
	if len(cred) != 5 || cred[0] != fakeAccessKey || cred[1] != amzDate[:8] || cred[2] != fakeRegion || cred[3] != "s3" || cred[4] != "aws4_request" {
		return denied, "bad credential scope"
	}
	signedHeaders := strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
	if !sort.StringsAreSorted(signedHeaders) {
		return denied, "signed headers not sorted"
	}
	var canonHeaders strings.Builder
	for _, h := range signedHeaders {
		var v string
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			if r.ContentLength < 0 {
				return denied, "content-length is signed but absent"
			}
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			vals := r.Header.Values(h)
			if len(vals) == 0 {
				return denied, "signed header " + h + " is absent"
			}
			for i := range vals {
				vals[i] = strings.TrimSpace(vals[i])
			}
			v = strings.Join(vals, ",")
		}
		canonHeaders.WriteString(h + ":" + v + "\n")
	}
	var keys []string
	for k := range q {
		if k != "X-Amz-Signature" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var canonQuery []string
	for _, k := range keys {
		for _, v := range q[k] {
			canonQuery = append(canonQuery, awsEscape(k, true)+"="+awsEscape(v, true))
		}
	}
	canonical := strings.Join([]string{
		r.Method,
		awsEscape(r.URL.Path, false),
		strings.Join(canonQuery, "&"),
		canonHeaders.String(),
		q.Get("X-Amz-SignedHeaders"),
		"UNSIGNED-PAYLOAD",
	}, "\n")
	scope := strings.Join(cred[1:], "/")
	crHash := sha256.Sum256([]byte(canonical))
	stringToSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(crHash[:])
	key := hmacSHA256([]byte("AWS4"+fakeSecretKey), cred[1])
	for _, part := range cred[2:] {
		key = hmacSHA256(key, part)
	}
	want := hex.EncodeToString(hmacSHA256(key, stringToSign))
	if !hmac.Equal([]byte(want), []byte(q.Get("X-Amz-Signature"))) {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
	}
	return "", ""
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// awsEscape is SigV4's URI encoding: everything but A-Z a-z 0-9 - _ . ~ is
// percent-encoded; "/" too unless it is a path separator.
func awsEscape(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func TestS3Store(t *testing.T) {
	storeSuite(t, func(t *testing.T) objectstore.Store {
		return newFakeS3(t).newStore(t, "")
	})
}

func TestS3StoreWithPrefix(t *testing.T) {
	storeSuite(t, func(t *testing.T) objectstore.Store {
		return newFakeS3(t).newStore(t, "task-results/")
	})
}

// The prefix is where objects land in the bucket, and keys come back
// without it.
func TestS3PrefixPlacement(t *testing.T) {
	f := newFakeS3(t)
	s := f.newStore(t, "task-results/")
	info := mustPut(t, s, "t1/out.bin", []byte("payload"), "")
	if info.Key != "t1/out.bin" {
		t.Errorf("Info.Key = %q", info.Key)
	}
	obj, err := f.backend.HeadObject(fakeBucket, "task-results/t1/out.bin")
	if err != nil {
		t.Fatalf("object not at prefixed key: %v", err)
	}
	if obj.Size != 7 {
		t.Errorf("stored size %d", obj.Size)
	}
	if _, err := f.backend.HeadObject(fakeBucket, "t1/out.bin"); err == nil {
		t.Error("object also stored without prefix")
	}
	for _, u := range []func() (string, error){
		func() (string, error) { return s.PresignGet(context.Background(), "t1/out.bin", time.Minute) },
		func() (string, error) {
			u, _, err := s.PresignPut(context.Background(), "t1/out.bin", time.Minute, 1, "", "")
			return u, err
		},
	} {
		got, err := u()
		if err != nil || !strings.Contains(got, "/"+fakeBucket+"/task-results/t1/out.bin?") {
			t.Errorf("presigned URL %q, %v: not path-style at the prefixed key", got, err)
		}
	}
	// Prefix plus key over S3's 1024-byte limit.
	long := strings.Repeat("k", objectstore.MaxKeyLen-5)
	if _, err := s.Stat(context.Background(), long); !errors.Is(err, objectstore.ErrInvalidKey) {
		t.Errorf("over-long prefixed key: %v, want ErrInvalidKey", err)
	}
}

// SHA-256 is stored as user metadata by Put and read back by Stat/Open;
// objects written by others (no or foreign metadata) have none.
func TestS3SHA256Metadata(t *testing.T) {
	f := newFakeS3(t)
	s := f.newStore(t, "")
	ctx := context.Background()
	data := []byte("hash me")
	mustPut(t, s, "h/k", data, "")
	obj, err := f.backend.HeadObject(fakeBucket, "h/k")
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.Metadata["X-Amz-Meta-Sha256"]; got != sha(data) {
		t.Errorf("x-amz-meta-sha256 = %q (metadata %v), want %s", got, obj.Metadata, sha(data))
	}
	foreignMeta := map[string]string{"X-Amz-Meta-Sha256": "not-a-hash", "Last-Modified": time.Now().UTC().Format(http.TimeFormat)}
	if _, err := f.backend.PutObject(fakeBucket, "h/foreign", foreignMeta, strings.NewReader("x"), 1, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stat(ctx, "h/foreign"); err != nil || st.SHA256 != "" {
		t.Errorf("foreign object Stat = %+v, %v; want no SHA256", st, err)
	}
}

// Bodies of each shape Put handles: seekable (hashed in place) including a
// ReaderAt not positioned at 0, small unseekable (spooled in memory) and
// large unseekable (spooled to a temporary file, uploaded in parts).
func TestS3PutBodyShapes(t *testing.T) {
	f := newFakeS3(t)
	s := f.newStore(t, "")
	ctx := context.Background()

	src := []byte("HEADER--the actual object")
	r := bytes.NewReader(src)
	if _, err := r.Seek(8, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	info, err := s.Put(ctx, "shape/offset", r, int64(len(src)-8), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, s, "shape/offset"); string(got) != "the actual object" || info.SHA256 != sha(got) {
		t.Errorf("offset body stored %q (info %+v)", got, info)
	}

	// A seeker that is not a ReaderAt.
	info, err = s.Put(ctx, "shape/seeker", onlySeeker{bytes.NewReader(src)}, int64(len(src)), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, s, "shape/seeker"); !bytes.Equal(got, src) || info.SHA256 != sha(src) {
		t.Errorf("seeker body stored %q", got)
	}
	// A seekable body with surplus bytes is refused like any other.
	if _, err := s.Put(ctx, "shape/seeker-long", bytes.NewReader(src), int64(len(src)-1), ""); err == nil {
		t.Error("seekable body longer than size accepted")
	}

	big := make([]byte, 17<<20) // just over minio-go's 16 MiB part size
	for i := range big {
		big[i] = byte(i * 7 % 251)
	}
	for _, size := range []int64{int64(len(big)), -1} {
		key := "shape/big" + strconv.FormatInt(size, 10)
		info, err := s.Put(ctx, key, io.MultiReader(bytes.NewReader(big)), size, "application/x-tar")
		if err != nil {
			t.Fatalf("big Put (size %d): %v", size, err)
		}
		got, oinfo := readAll(t, s, key)
		if !bytes.Equal(got, big) || info.SHA256 != sha(big) || oinfo.SHA256 != sha(big) || oinfo.Size != int64(len(big)) {
			t.Errorf("big object (size %d) round trip: %d bytes, info %+v / %+v", size, len(got), info, oinfo)
		}
	}
	if f.parts.Load() < 2 {
		t.Errorf("%d multipart parts uploaded; the large bodies should have gone multipart", f.parts.Load())
	}
	// A too-short large body fails while spooling, before any upload.
	if _, err := s.Put(ctx, "shape/big-short", io.MultiReader(bytes.NewReader(big[:10<<20])), int64(len(big)), ""); err == nil {
		t.Error("short large body accepted")
	}
	if _, err := s.Stat(ctx, "shape/big-short"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("short large body stored something: %v", err)
	}
}

type onlySeeker struct{ r *bytes.Reader }

func (o onlySeeker) Read(p []byte) (int, error)                { return o.r.Read(p) }
func (o onlySeeker) Seek(off int64, whence int) (int64, error) { return o.r.Seek(off, whence) }

// Presigned URLs are bound to method, key, expiry, content type and length:
// checked by presignVerifier, which applies S3's rules. gofakes3 alone would
// accept all of these.
func TestS3PresignedURLsAreBound(t *testing.T) {
	f := newFakeS3(t)
	s := f.newStore(t, "p/")
	ctx := context.Background()
	data := []byte("0123456789")
	u, headers, err := s.PresignPut(ctx, "k", time.Minute, int64(len(data)), "text/plain", "")
	if err != nil {
		t.Fatal(err)
	}
	q, _ := url.Parse(u)
	if sh := q.Query().Get("X-Amz-SignedHeaders"); sh != "content-length;content-type;host" {
		t.Errorf("PUT URL signs %q, want content-length;content-type;host", sh)
	}
	if exp := q.Query().Get("X-Amz-Expires"); exp != "60" {
		t.Errorf("X-Amz-Expires = %q, want 60", exp)
	}
	stored := func(key string) bool {
		_, err := s.Stat(ctx, key)
		return err == nil
	}
	putWith := func(u, ct string, body []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodPut, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		return do(t, req)
	}
	denied := func(what string, resp *http.Response) {
		t.Helper()
		if b := readBody(t, resp); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s %q, want 403", what, resp.Status, b)
		}
	}
	denied("wrong content type", putWith(u, "application/json", data))
	denied("wrong length", putWith(u, "text/plain", append(data, '!')))
	denied("other key", putWith(strings.Replace(u, "/p/k?", "/p/other?", 1), "text/plain", data))
	denied("longer expiry", putWith(withQuery(t, u, func(q url.Values) { q.Set("X-Amz-Expires", "3600") }), "text/plain", data))
	denied("tampered signature", putWith(withQuery(t, u, func(q url.Values) {
		sig := []byte(q.Get("X-Amz-Signature"))
		sig[0] ^= 1
		q.Set("X-Amz-Signature", string(sig))
	}), "text/plain", data))
	g, err := s.PresignGet(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	denied("GET URL for PUT", putWith(g, "text/plain", data))
	if stored("k") || stored("other") {
		t.Fatal("a refused presigned PUT stored an object")
	}
	resp := httpPut(t, u, headers, data)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("valid presigned PUT: %s %s", resp.Status, readBody(t, resp))
	}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	denied("PUT URL for GET", do(t, req))
	resp, body := httpGet(t, g)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("valid presigned GET: %s %q", resp.Status, body)
	}
	// Objects uploaded by URL carry no SHA-256: it was unknown at signing.
	if st, err := s.Stat(ctx, "k"); err != nil || st.SHA256 != "" || st.ContentType != "text/plain" || st.Size != int64(len(data)) {
		t.Errorf("Stat after presigned PUT = %+v, %v", st, err)
	}

	// Expiry: valid just before, refused at the TTL.
	f.skew.Store(int64(58 * time.Second))
	if resp, _ := httpGet(t, g); resp.StatusCode != http.StatusOK {
		t.Errorf("GET just before expiry: %s", resp.Status)
	}
	f.skew.Store(int64(61 * time.Second))
	resp, body = httpGet(t, g)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "expired") {
		t.Errorf("expired GET: %s %q", resp.Status, body)
	}
	if f.presigned.Load() == 0 {
		t.Error("verifier saw no presigned request")
	}
}

func TestNewS3Errors(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()

	cfg := f.config("")
	cfg.Bucket = "no-such-bucket"
	_, err := objectstore.NewS3(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), `"no-such-bucket" does not exist`) {
		t.Errorf("missing bucket: %v", err)
	}

	for name, mutate := range map[string]func(*objectstore.S3Config){
		"empty bucket":    func(c *objectstore.S3Config) { c.Bucket = "" },
		"bad bucket":      func(c *objectstore.S3Config) { c.Bucket = "Bad_Bucket" },
		"bad prefix":      func(c *objectstore.S3Config) { c.Prefix = "/abs/" },
		"traversal":       func(c *objectstore.S3Config) { c.Prefix = "../" },
		"half creds":      func(c *objectstore.S3Config) { c.SecretKey = "" },
		"other half":      func(c *objectstore.S3Config) { c.AccessKey = "" },
		"bad endpoint":    func(c *objectstore.S3Config) { c.Endpoint = "http://not a host" },
		"refused connect": func(c *objectstore.S3Config) { c.Endpoint = closedAddr(t) },
	} {
		cfg := f.config("")
		mutate(&cfg)
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		s, err := objectstore.NewS3(ctx, cfg)
		cancel()
		if err == nil || s != nil {
			t.Errorf("%s: NewS3(%v) = %v, %v; want error", name, cfg, s, err)
		} else if strings.Contains(err.Error(), fakeSecretKey) {
			t.Errorf("%s: error reveals the secret key: %v", name, err)
		}
	}

	// Without a region, minio-go asks the server for the bucket location;
	// gofakes3 answers, and presigning then works.
	cfg = f.config("")
	cfg.Region = ""
	s, err := objectstore.NewS3(ctx, cfg)
	if err != nil {
		t.Fatalf("NewS3 without region: %v", err)
	}
	mustPut(t, s, "r", []byte("x"), "")
	g, err := s.PresignGet(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := httpGet(t, g); resp.StatusCode != http.StatusOK || string(body) != "x" {
		t.Errorf("GET without configured region: %s %q", resp.Status, body)
	}
}

// closedAddr returns a loopback address with nothing listening.
func closedAddr(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	return addr
}

// A bounded S3 PUT URL signs the content type but not the length: S3
// takes any size with that type, and refuses another type.
func TestS3PresignPutUpTo(t *testing.T) {
	f := newFakeS3(t)
	s := f.newStore(t, "p/")
	ctx := context.Background()
	u, headers, err := s.PresignPutUpTo(ctx, "out/r.nef", time.Minute, 1<<30, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	q, _ := url.Parse(u)
	if sh := q.Query().Get("X-Amz-SignedHeaders"); sh != "content-type;host" {
		t.Errorf("PUT URL signs %q, want content-type;host", sh)
	}
	req, _ := http.NewRequest(http.MethodPut, u, bytes.NewReader([]byte("x")))
	req.Header.Set("Content-Type", "text/plain")
	if resp := do(t, req); resp.StatusCode != http.StatusForbidden {
		t.Errorf("other content type: %s", resp.Status)
	}
	data := []byte("a program's output of a size nobody knew")
	if resp := httpPut(t, u, headers, data); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s %q", resp.Status, readBody(t, resp))
	}
	got, _ := readAll(t, s, "out/r.nef")
	if !bytes.Equal(got, data) {
		t.Errorf("stored %q", got)
	}
	if _, _, err := s.PresignPutUpTo(ctx, "out/r.nef", time.Minute, -1, ""); err == nil {
		t.Error("a negative maximum was signed")
	}
}

// A PUT URL bound to a sha256 signs S3's checksum header with it: a PUT
// without the header, or with another digest, fails the signature, and S3
// itself refuses a body that does not match the header (BadDigest, which
// the fake server does not check).
func TestS3PresignedPutBindsItsDigest(t *testing.T) {
	f := newFakeS3(t)
	s := f.newStore(t, "p/")
	ctx := context.Background()
	data := []byte("the real result")
	sum := sha256.Sum256(data)
	u, headers, err := s.PresignPut(ctx, "k", time.Minute, int64(len(data)), "application/json", hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := url.Parse(u)
	if sh := q.Query().Get("X-Amz-SignedHeaders"); sh != "content-length;content-type;host;x-amz-checksum-sha256" {
		t.Errorf("PUT URL signs %q, want the checksum header too", sh)
	}
	if got, want := headers["X-Amz-Checksum-Sha256"], base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Fatalf("headers %v: checksum %q, want %q", headers, got, want)
	}
	without := map[string]string{}
	for k, v := range headers {
		if k != "X-Amz-Checksum-Sha256" {
			without[k] = v
		}
	}
	other := sha256.Sum256([]byte("a forged result"))
	forged := map[string]string{}
	for k, v := range headers {
		forged[k] = v
	}
	forged["X-Amz-Checksum-Sha256"] = base64.StdEncoding.EncodeToString(other[:])
	for what, h := range map[string]map[string]string{"no checksum header": without, "another checksum": forged} {
		if resp := httpPut(t, u, h, data); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s %s, want 403", what, resp.Status, readBody(t, resp))
		}
	}
	if resp := httpPut(t, u, headers, data); resp.StatusCode != http.StatusOK {
		t.Fatalf("the signed upload: %s %s", resp.Status, readBody(t, resp))
	}
	if _, _, err := s.PresignPut(ctx, "k", time.Minute, 1, "", "not-hex"); err == nil {
		t.Error("PresignPut took a sha256 that is not hex")
	}
}
