package objectstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sign computes the URL signature. The input names every parameter that
// changes what the URL allows, separated by newlines (which neither keys nor
// content types can contain), with a version tag so a future format cannot
// be confused with this one. GET URLs have size -1 and no content type;
// PUT URLs always have both, so one can never verify as the other.
func (f *FS) sign(method, key string, expires, size int64, contentType string) []byte {
	sizeStr := ""
	if size >= 0 {
		sizeStr = strconv.FormatInt(size, 10)
	}
	return f.signSpec(method, key, expires, sizeStr, contentType)
}

// signBounded signs a PUT URL that accepts any size up to maxSize: its size
// field is "max:<n>", which no exact size can spell, so a bounded URL never
// verifies as an exact one or the other way round.
func (f *FS) signBounded(key string, expires, maxSize int64, contentType string) []byte {
	return f.signSpec("PUT", key, expires, "max:"+strconv.FormatInt(maxSize, 10), contentType)
}

func (f *FS) signSpec(method, key string, expires int64, sizeSpec, contentType string) []byte {
	mac := hmac.New(sha256.New, f.secret)
	fmt.Fprintf(mac, "taskmesh-objectstore-url-v1\n%s\n%s\n%d\n%s\n%s", method, key, expires, sizeSpec, contentType)
	return mac.Sum(nil)
}

func encodeSig(sig []byte) string { return base64.RawURLEncoding.EncodeToString(sig) }

// Query parameters of FS presigned URLs.
const (
	paramExpires   = "X-Expires"
	paramSignature = "X-Signature"
	paramSize      = "X-Size"
	paramMaxSize   = "X-Max-Size"
	paramSHA256    = "X-SHA256"
)

// exactSizeSpec is the signed size field of an exact PUT: the size, and
// the body's sha256 when the URL is bound to one. "<n>:sha256:<hex>" is
// no plain size, so a bound URL never verifies as an unbound one.
func exactSizeSpec(size int64, sha string) string {
	spec := strconv.FormatInt(size, 10)
	if sha != "" {
		spec += ":sha256:" + sha
	}
	return spec
}

// PresignGet implements Store. The URL is valid for GET and HEAD.
func (f *FS) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if err := checkTTL(ttl); err != nil {
		return "", err
	}
	exp := f.now().Add(ttl).Unix()
	q := url.Values{
		paramExpires:   {strconv.FormatInt(exp, 10)},
		paramSignature: {encodeSig(f.sign("GET", key, exp, -1, ""))},
	}
	return f.baseURL + "/" + key + "?" + q.Encode(), nil
}

// PresignPut implements Store. The client must send the returned headers:
// Content-Type verbatim, and a Content-Length equal to size (with net/http,
// set Request.ContentLength; the header map carries it for other clients).
// A size above MaxPutBytes is refused here rather than at upload time.
func (f *FS) PresignPut(ctx context.Context, key string, ttl time.Duration, size int64, contentType, sha string) (string, map[string]string, error) {
	if err := ValidateKey(key); err != nil {
		return "", nil, err
	}
	if err := checkSHA256(sha); err != nil {
		return "", nil, fmt.Errorf("objectstore: presign put %s: %w", key, err)
	}
	if err := checkTTL(ttl); err != nil {
		return "", nil, err
	}
	if size < 0 || size > f.maxPut {
		return "", nil, fmt.Errorf("objectstore: presign put %s: size %d out of range [0, %d]", key, size, f.maxPut)
	}
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return "", nil, err
	}
	exp := f.now().Add(ttl).Unix()
	q := url.Values{
		paramExpires:   {strconv.FormatInt(exp, 10)},
		paramSize:      {strconv.FormatInt(size, 10)},
		paramSignature: {encodeSig(f.signSpec("PUT", key, exp, exactSizeSpec(size, sha), ct))},
	}
	if sha != "" {
		q.Set(paramSHA256, sha)
	}
	headers := map[string]string{"Content-Type": ct, "Content-Length": strconv.FormatInt(size, 10)}
	return f.baseURL + "/" + key + "?" + q.Encode(), headers, nil
}

// PresignPutUpTo implements Store. The client must send Content-Type
// verbatim and a Content-Length of at most maxSize.
func (f *FS) PresignPutUpTo(ctx context.Context, key string, ttl time.Duration, maxSize int64, contentType string) (string, map[string]string, error) {
	if err := ValidateKey(key); err != nil {
		return "", nil, err
	}
	if err := checkTTL(ttl); err != nil {
		return "", nil, err
	}
	if maxSize < 0 || maxSize > f.maxPut {
		return "", nil, fmt.Errorf("objectstore: presign put %s: maximum size %d out of range [0, %d]", key, maxSize, f.maxPut)
	}
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return "", nil, err
	}
	exp := f.now().Add(ttl).Unix()
	q := url.Values{
		paramExpires:   {strconv.FormatInt(exp, 10)},
		paramMaxSize:   {strconv.FormatInt(maxSize, 10)},
		paramSignature: {encodeSig(f.signBounded(key, exp, maxSize, ct))},
	}
	return f.baseURL + "/" + key + "?" + q.Encode(), map[string]string{"Content-Type": ct}, nil
}

// Handler serves GET/HEAD (Content-Type, Content-Length, ETag = sha256,
// Range support via http.ServeContent) and PUT on signed URLs, under the
// path of BaseURL. Mount it on the full path, without http.StripPrefix, e.g.
//
//	mux.Handle("/objects/", fs.Handler()) // BaseURL "http://host:8080/objects"
//
// The URL signature is the only authentication, so the handler must not sit
// behind middleware that demands other credentials from executors.
//
// Errors are short plain text and never name a filesystem path:
// 400 invalid key, size mismatch or a body that is not the signed sha256,
// 403 bad or expired signature, 404
// missing object, 405 method, 409 key conflict, 411 no Content-Length,
// 413 above MaxPutBytes, 507 disk full, 500 anything else.
func (f *FS) Handler() http.Handler { return http.HandlerFunc(f.serveHTTP) }

func (f *FS) serveHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.URL.Path, f.basePath+"/")
	if !ok {
		plainError(w, "not found", http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut:
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		plainError(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if ValidateKey(key) != nil {
		plainError(w, "invalid key", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPut {
		f.servePut(w, r, key)
		return
	}
	f.serveGet(w, r, key)
}

// plainError is http.Error with the headers a browser should see on any
// response from this origin.
func plainError(w http.ResponseWriter, msg string, code int) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.Error(w, msg, code)
}

// singleParam returns the only value of name in q; a missing or repeated
// parameter is refused so that no two readings of one URL can differ.
func singleParam(q url.Values, name string) (string, bool) {
	v := q[name]
	if len(v) != 1 || v[0] == "" {
		return "", false
	}
	return v[0], true
}

// verify checks the signature and expiry of r for method ("GET" for GET and
// HEAD). size is -1 and contentType "" for GET. It writes the 403 itself and
// reports whether the request may proceed. The expiry is checked after the
// signature so that "expired" is only ever said about a genuine URL.
func (f *FS) verify(w http.ResponseWriter, q url.Values, method, key string, size int64, contentType string) bool {
	return f.verifyWith(w, q, func(exp int64) []byte { return f.sign(method, key, exp, size, contentType) })
}

// verifyWith is verify with the expected signature computed by want.
func (f *FS) verifyWith(w http.ResponseWriter, q url.Values, want func(expires int64) []byte) bool {
	expStr, ok1 := singleParam(q, paramExpires)
	sigStr, ok2 := singleParam(q, paramSignature)
	if !ok1 || !ok2 {
		plainError(w, "missing signature", http.StatusForbidden)
		return false
	}
	exp, err := strconv.ParseInt(expStr, 10, 64)
	sig, err2 := base64.RawURLEncoding.DecodeString(sigStr)
	if err != nil || err2 != nil || !hmac.Equal(sig, want(exp)) {
		plainError(w, "invalid signature", http.StatusForbidden)
		return false
	}
	if !f.now().Before(time.Unix(exp, 0)) {
		plainError(w, "signature expired", http.StatusForbidden)
		return false
	}
	return true
}

func (f *FS) serveGet(w http.ResponseWriter, r *http.Request, key string) {
	q := r.URL.Query()
	_, hasSize := q[paramSize]
	if _, bounded := q[paramMaxSize]; hasSize || bounded {
		// A PUT URL: refuse it plainly rather than as a signature mismatch.
		plainError(w, "invalid signature", http.StatusForbidden)
		return
	}
	if !f.verify(w, q, "GET", key, -1, "") {
		return
	}
	file, h, err := f.openObject(key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			plainError(w, "not found", http.StatusNotFound)
		} else {
			plainError(w, "internal error", http.StatusInternalServerError)
		}
		return
	}
	defer file.Close()
	hdr := w.Header()
	hdr.Set("Content-Type", h.ContentType)
	hdr.Set("ETag", `"`+h.SHA256+`"`)
	hdr.Set("X-Content-Type-Options", "nosniff")
	// Content is uploaded by executors and served from the gateway's origin:
	// a sandbox CSP keeps an uploaded HTML file from running script there.
	hdr.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	// The URL is a bearer credential; shared caches must not keep the body.
	hdr.Set("Cache-Control", "private")
	http.ServeContent(w, r, "", time.Unix(0, h.ModTimeNS), io.NewSectionReader(file, headerSize, h.Size))
}

// bodyReader remembers a failure of the request body so that servePut can
// tell a broken upload (400) from a broken disk (500).
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (f *FS) servePut(w http.ResponseWriter, r *http.Request, key string) {
	q := r.URL.Query()
	if _, bounded := q[paramMaxSize]; bounded {
		f.servePutBounded(w, r, key, q)
		return
	}
	sizeStr, ok := singleParam(q, paramSize)
	if !ok {
		// A GET URL (or none at all) used for PUT.
		plainError(w, "invalid signature", http.StatusForbidden)
		return
	}
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil || size < 0 {
		plainError(w, "invalid signature", http.StatusForbidden)
		return
	}
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		plainError(w, "invalid signature", http.StatusForbidden)
		return
	}
	sha := ""
	if _, bound := q[paramSHA256]; bound {
		if sha, ok = singleParam(q, paramSHA256); !ok || checkSHA256(sha) != nil || sha == "" {
			plainError(w, "invalid signature", http.StatusForbidden)
			return
		}
	}
	// The content type is not in the URL: the client must send exactly the
	// signed one, so a different header fails the signature like S3 does.
	ct := r.Header.Get("Content-Type")
	if !f.verifyWith(w, q, func(exp int64) []byte { return f.signSpec("PUT", key, exp, exactSizeSpec(size, sha), ct) }) {
		return
	}
	switch {
	case r.ContentLength < 0:
		plainError(w, "Content-Length required", http.StatusLengthRequired)
		return
	case size > f.maxPut:
		// Possible only for a URL signed before MaxPutBytes was lowered.
		plainError(w, "object too large", http.StatusRequestEntityTooLarge)
		return
	case r.ContentLength != size:
		plainError(w, "Content-Length does not match the signed size", http.StatusBadRequest)
		return
	}
	f.store(w, r, key, size, ct, sha)
}

// store writes the body of a verified PUT of size bytes (whose sha256
// must be sha, when given) and answers it.
func (f *FS) store(w http.ResponseWriter, r *http.Request, key string, size int64, ct, sha string) {
	body := &bodyReader{r: r.Body}
	info, err := f.put(r.Context(), key, body, size, ct, sha)
	if err != nil {
		switch {
		case body.err != nil, errors.Is(err, errSizeMismatch):
			plainError(w, "incomplete or oversized body", http.StatusBadRequest)
		case errors.Is(err, errDigestMismatch):
			plainError(w, "body does not match the signed sha256", http.StatusBadRequest)
		case errors.Is(err, errKeyConflict):
			plainError(w, "key conflicts with an existing object", http.StatusConflict)
		case errors.Is(err, syscall.ENOSPC):
			plainError(w, "insufficient storage", http.StatusInsufficientStorage)
		default:
			plainError(w, "internal error", http.StatusInternalServerError)
		}
		return
	}
	w.Header().Set("ETag", `"`+info.SHA256+`"`)
	w.WriteHeader(http.StatusOK)
}

// servePutBounded serves a PUT on a URL of PresignPutUpTo: any
// Content-Length up to the signed maximum.
func (f *FS) servePutBounded(w http.ResponseWriter, r *http.Request, key string, q url.Values) {
	maxStr, ok := singleParam(q, paramMaxSize)
	maxSize, err := strconv.ParseInt(maxStr, 10, 64)
	if _, exact := q[paramSize]; !ok || exact || err != nil || maxSize < 0 || len(r.Header.Values("Content-Type")) > 1 {
		plainError(w, "invalid signature", http.StatusForbidden)
		return
	}
	ct := r.Header.Get("Content-Type")
	if !f.verifyWith(w, q, func(exp int64) []byte { return f.signBounded(key, exp, maxSize, ct) }) {
		return
	}
	switch {
	case r.ContentLength < 0:
		plainError(w, "Content-Length required", http.StatusLengthRequired)
		return
	case r.ContentLength > maxSize || r.ContentLength > f.maxPut:
		plainError(w, "object too large", http.StatusRequestEntityTooLarge)
		return
	}
	f.store(w, r, key, r.ContentLength, ct, "")
}
