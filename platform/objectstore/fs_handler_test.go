package objectstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
)

// newFSServer starts an httptest server with the FS handler mounted the way
// the gateway mounts it (on a ServeMux at the BaseURL path), and returns it
// with the store. The listener is opened first so BaseURL can name it.
func newFSServer(t *testing.T, mutate func(*objectstore.FSConfig)) (*httptest.Server, *objectstore.FS) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := newTestFS(t, func(c *objectstore.FSConfig) {
		c.BaseURL = "http://" + ln.Addr().String() + "/objects"
		if mutate != nil {
			mutate(c)
		}
	})
	mux := http.NewServeMux()
	mux.Handle("/objects/", fs.Handler())
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, fs
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// expectStatus checks an error response: the code, and a short plain body
// that names no filesystem path.
func expectStatus(t *testing.T, what string, resp *http.Response, want int) {
	t.Helper()
	body := readBody(t, resp)
	if resp.StatusCode != want {
		t.Errorf("%s: status %d (%q), want %d", what, resp.StatusCode, body, want)
		return
	}
	if want >= 400 {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s: error Content-Type %q", what, ct)
		}
		if len(body) > 80 || strings.Contains(body, "/") {
			t.Errorf("%s: error body %q is long or names a path", what, body)
		}
	}
}

func withQuery(t *testing.T, raw string, edit func(q url.Values)) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	edit(q)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestFSHandlerGetRangeHead(t *testing.T) {
	srv, fs := newFSServer(t, nil)
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	info := mustPut(t, fs, "res/data.txt", data, "text/plain; charset=utf-8")
	u, err := fs.PresignGet(context.Background(), "res/data.txt", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, srv.URL+"/objects/res/data.txt?") {
		t.Fatalf("URL %q not under BaseURL", u)
	}
	for _, p := range []string{"X-Expires=", "X-Signature="} {
		if !strings.Contains(u, p) {
			t.Errorf("URL %q lacks %s", u, p)
		}
	}

	resp, body := httpGet(t, u)
	if resp.StatusCode != http.StatusOK || body == nil || string(body) != string(data) {
		t.Fatalf("GET: %s %q", resp.Status, body)
	}
	etag := `"` + info.SHA256 + `"`
	for h, want := range map[string]string{
		"Content-Type":           "text/plain; charset=utf-8",
		"Content-Length":         strconv.Itoa(len(data)),
		"ETag":                   etag,
		"Accept-Ranges":          "bytes",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("GET %s = %q, want %q", h, got, want)
		}
	}
	if resp.Header.Get("Last-Modified") == "" {
		t.Error("GET has no Last-Modified")
	}

	ranges := []struct {
		rng, want, contentRange string
	}{
		{"bytes=0-4", "01234", "bytes 0-4/36"},
		{"bytes=10-", "abcdefghijklmnopqrstuvwxyz", "bytes 10-35/36"},
		{"bytes=-3", "xyz", "bytes 33-35/36"},
		{"bytes=35-100", "z", "bytes 35-35/36"},
	}
	for _, r := range ranges {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Range", r.rng)
		resp := do(t, req)
		got := readBody(t, resp)
		if resp.StatusCode != http.StatusPartialContent || got != r.want || resp.Header.Get("Content-Range") != r.contentRange {
			t.Errorf("Range %s: %s %q %q; want 206 %q %q", r.rng, resp.Status, got, resp.Header.Get("Content-Range"), r.want, r.contentRange)
		}
	}
	// Multiple ranges come back as multipart/byteranges.
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Range", "bytes=0-1,5-6")
	resp = do(t, req)
	if got := readBody(t, resp); resp.StatusCode != http.StatusPartialContent ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/byteranges") || !strings.Contains(got, "01") || !strings.Contains(got, "56") {
		t.Errorf("multi-range: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	req, _ = http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Range", "bytes=100-200")
	expectStatus(t, "unsatisfiable range", do(t, req), http.StatusRequestedRangeNotSatisfiable)

	// If-None-Match with the ETag: 304.
	req, _ = http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("If-None-Match", etag)
	if resp := do(t, req); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %s", resp.Status)
	}

	// HEAD on the GET URL: headers, no body.
	req, _ = http.NewRequest(http.MethodHead, u, nil)
	resp = do(t, req)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Length") != strconv.Itoa(len(data)) || resp.Header.Get("ETag") != etag {
		t.Errorf("HEAD: %s %v", resp.Status, resp.Header)
	}
	if b := readBody(t, resp); b != "" {
		t.Errorf("HEAD body %q", b)
	}
}

func TestFSHandlerGetErrors(t *testing.T) {
	clock := clocktest.NewFixed(time.Now().Truncate(time.Second))
	srv, fs := newFSServer(t, func(c *objectstore.FSConfig) { c.Now = clock.Now })
	ctx := context.Background()
	mustPut(t, fs, "a/b", []byte("secret result"), "")
	mustPut(t, fs, "a/c", []byte("other result"), "")
	good, err := fs.PresignGet(ctx, "a/b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	get := func(u string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return do(t, req)
	}

	expectStatus(t, "unsigned", get(srv.URL+"/objects/a/b"), http.StatusForbidden)
	expectStatus(t, "other key", get(strings.Replace(good, "/a/b?", "/a/c?", 1)), http.StatusForbidden)
	expectStatus(t, "longer expiry", get(withQuery(t, good, func(q url.Values) {
		exp, _ := strconv.ParseInt(q.Get("X-Expires"), 10, 64)
		q.Set("X-Expires", strconv.FormatInt(exp+3600, 10))
	})), http.StatusForbidden)
	expectStatus(t, "flipped signature", get(withQuery(t, good, func(q url.Values) {
		s := []byte(q.Get("X-Signature"))
		if s[0] == 'A' {
			s[0] = 'B'
		} else {
			s[0] = 'A'
		}
		q.Set("X-Signature", string(s))
	})), http.StatusForbidden)
	expectStatus(t, "garbage signature", get(withQuery(t, good, func(q url.Values) { q.Set("X-Signature", "!!!") })), http.StatusForbidden)
	expectStatus(t, "duplicate expiry", get(withQuery(t, good, func(q url.Values) { q.Add("X-Expires", "1") })), http.StatusForbidden)
	expectStatus(t, "size added", get(withQuery(t, good, func(q url.Values) { q.Set("X-Size", "13") })), http.StatusForbidden)

	// Signature from another secret.
	otherFS, _ := newTestFS(t, func(c *objectstore.FSConfig) {
		c.BaseURL = srv.URL + "/objects"
		c.Secret = bytes.Repeat([]byte("z"), 32)
	})
	forged, _ := otherFS.PresignGet(ctx, "a/b", time.Minute)
	expectStatus(t, "other secret", get(forged), http.StatusForbidden)

	// A PUT URL is not a GET URL.
	putURL, _, _ := fs.PresignPut(ctx, "a/b", time.Minute, 13, "", "")
	expectStatus(t, "PUT URL for GET", get(putURL), http.StatusForbidden)

	// Signed but missing object: 404.
	missing, _ := fs.PresignGet(ctx, "a/none", time.Minute)
	expectStatus(t, "missing", get(missing), http.StatusNotFound)
	dir, _ := fs.PresignGet(ctx, "a", time.Minute)
	expectStatus(t, "key prefix", get(dir), http.StatusNotFound)

	// Methods.
	for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		req, _ := http.NewRequest(m, good, nil)
		resp := do(t, req)
		if resp.Header.Get("Allow") == "" {
			t.Errorf("%s: no Allow header", m)
		}
		expectStatus(t, m, resp, http.StatusMethodNotAllowed)
	}

	// Expiry by the injected clock: valid until the TTL has passed.
	resp := get(good)
	expectStatus(t, "before expiry", resp, http.StatusOK)
	clock.Advance(59 * time.Second)
	expectStatus(t, "just before expiry", get(good), http.StatusOK)
	clock.Advance(time.Second)
	resp = get(good)
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("expired: %s %q", resp.Status, body)
	}
}

// Keys that climb out of the store never reach the filesystem, whether the
// router cleans the path or not.
func TestFSHandlerTraversal(t *testing.T) {
	srv, fs := newFSServer(t, nil)
	mustPut(t, fs, "inside", []byte("x"), "")
	h := fs.Handler()
	base, _ := url.Parse(srv.URL)
	for _, p := range []string{
		"/objects/../objects/inside",
		"/objects/a/../../../etc/passwd",
		"/objects/%2e%2e/%2e%2e/etc/passwd",
		"/objects/..%2f..%2fetc%2fpasswd",
		"/objects//etc/passwd",
		"/objects/./inside",
		"/objects/",
		"/objects/a%00b",
	} {
		for _, m := range []string{http.MethodGet, http.MethodPut} {
			// Straight to the handler, so no ServeMux cleaning interferes.
			u := *base
			u.Opaque = p
			req := &http.Request{Method: m, URL: &u, Header: http.Header{}, Host: base.Host, Body: http.NoBody}
			if dec, err := url.PathUnescape(p); err == nil {
				u.Path = dec
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
				t.Errorf("%s %s: %d %q, want 400/404", m, p, rec.Code, rec.Body.String())
			}
		}
	}
	// Outside the BaseURL path: 404.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/elsewhere/inside", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("outside base path: %d", rec.Code)
	}
}

func TestFSHandlerPut(t *testing.T) {
	clock := clocktest.NewFixed(time.Now().Truncate(time.Second))
	_, fs := newFSServer(t, func(c *objectstore.FSConfig) { c.Now = clock.Now })
	ctx := context.Background()
	data := []byte(`{"accuracy":0.93}`)
	size := int64(len(data))
	u, headers, err := fs.PresignPut(ctx, "results/r1.json", time.Minute, size, "application/json", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(u, "X-Size="+strconv.FormatInt(size, 10)) {
		t.Errorf("PUT URL %q lacks X-Size", u)
	}
	put := func(u, ct string, body io.Reader, length int64) *http.Response {
		req, err := http.NewRequest(http.MethodPut, u, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		return do(t, req)
	}
	stored := func() bool {
		_, err := fs.Stat(ctx, "results/r1.json")
		return err == nil
	}

	// Rejected before anything is stored.
	expectStatus(t, "wrong content type", put(u, "text/plain", bytes.NewReader(data), size), http.StatusForbidden)
	expectStatus(t, "no content type", put(u, "", bytes.NewReader(data), size), http.StatusForbidden)
	expectStatus(t, "chunked", put(u, "application/json", io.MultiReader(bytes.NewReader(data)), -1), http.StatusLengthRequired)
	bigger := append(append([]byte{}, data...), '!')
	expectStatus(t, "Content-Length above signed size", put(u, "application/json", bytes.NewReader(bigger), size+1), http.StatusBadRequest)
	expectStatus(t, "Content-Length below signed size", put(u, "application/json", bytes.NewReader(data[:5]), 5), http.StatusBadRequest)
	expectStatus(t, "size changed", put(withQuery(t, u, func(q url.Values) { q.Set("X-Size", strconv.FormatInt(size+1, 10)) }), "application/json", bytes.NewReader(bigger), size+1), http.StatusForbidden)
	expectStatus(t, "size removed", put(withQuery(t, u, func(q url.Values) { q.Del("X-Size") }), "application/json", bytes.NewReader(data), size), http.StatusForbidden)
	expectStatus(t, "expiry changed", put(withQuery(t, u, func(q url.Values) {
		exp, _ := strconv.ParseInt(q.Get("X-Expires"), 10, 64)
		q.Set("X-Expires", strconv.FormatInt(exp+1, 10))
	}), "application/json", bytes.NewReader(data), size), http.StatusForbidden)
	expectStatus(t, "key changed", put(strings.Replace(u, "/r1.json?", "/r2.json?", 1), "application/json", bytes.NewReader(data), size), http.StatusForbidden)
	getURL, _ := fs.PresignGet(ctx, "results/r1.json", time.Minute)
	expectStatus(t, "GET URL for PUT", put(getURL, "application/json", bytes.NewReader(data), size), http.StatusForbidden)
	expectStatus(t, "GET URL plus size for PUT", put(withQuery(t, getURL, func(q url.Values) { q.Set("X-Size", strconv.FormatInt(size, 10)) }), "application/json", bytes.NewReader(data), size), http.StatusForbidden)
	if stored() {
		t.Fatal("an invalid PUT stored the object")
	}

	// The valid upload, with the helper an executor would use.
	resp := httpPut(t, u, headers, data)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s %q", resp.Status, readBody(t, resp))
	}
	got, info := readAll(t, fs, "results/r1.json")
	if !bytes.Equal(got, data) || info.ContentType != "application/json" || resp.Header.Get("ETag") != `"`+info.SHA256+`"` || info.SHA256 != sha(data) {
		t.Errorf("stored %q %+v, PUT ETag %q", got, info, resp.Header.Get("ETag"))
	}
	// The stored object is served back with the same ETag.
	gresp, body := httpGet(t, getURL)
	if string(body) != string(data) || gresp.Header.Get("ETag") != resp.Header.Get("ETag") || gresp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET after PUT: %q %v", body, gresp.Header)
	}

	// Expired PUT URL.
	clock.Advance(time.Minute)
	resp = put(u, "application/json", bytes.NewReader(data), size)
	if b := readBody(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(b, "expired") {
		t.Errorf("expired PUT: %s %q", resp.Status, b)
	}
}

func TestFSHandlerPutTooLarge(t *testing.T) {
	const maxPut = 1000
	srv, fs := newFSServer(t, func(c *objectstore.FSConfig) { c.MaxPutBytes = maxPut })
	ctx := context.Background()
	if _, _, err := fs.PresignPut(ctx, "big", time.Minute, maxPut+1, "", ""); err == nil {
		t.Error("PresignPut above MaxPutBytes accepted")
	}
	if _, _, err := fs.PresignPut(ctx, "big", time.Minute, maxPut, "", ""); err != nil {
		t.Errorf("PresignPut at MaxPutBytes: %v", err)
	}
	// A URL signed with the same secret by a store with a higher limit (an
	// old configuration) is refused by size, before reading the body.
	laxFS, _ := newTestFS(t, func(c *objectstore.FSConfig) {
		c.BaseURL = srv.URL + "/objects"
		c.MaxPutBytes = 10 * maxPut
	})
	u, headers, err := laxFS.PresignPut(ctx, "big", time.Minute, 5*maxPut, "", "")
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, "oversized", httpPut(t, u, headers, make([]byte, 5*maxPut)), http.StatusRequestEntityTooLarge)
	if _, err := fs.Stat(ctx, "big"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("oversized PUT stored something: %v", err)
	}
}

// A client that promises Content-Length bytes and hangs up early stores
// nothing, and the previous object survives.
func TestFSHandlerPutTruncatedBody(t *testing.T) {
	_, fs := newFSServer(t, nil)
	ctx := context.Background()
	mustPut(t, fs, "t/k", []byte("previous"), "")
	u, _, err := fs.PresignPut(ctx, "t/k", time.Minute, 100, "application/octet-stream", "")
	if err != nil {
		t.Fatal(err)
	}
	pu, _ := url.Parse(u)
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\n%s", pu.RequestURI(), pu.Host, strings.Repeat("x", 40))
	conn.(*net.TCPConn).CloseWrite()
	// The handler answers once reading the body fails, so when the response
	// arrives the upload has been abandoned.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("truncated PUT answered %s, want 400", resp.Status)
	}
	resp.Body.Close()
	conn.Close()
	if got, _ := readAll(t, fs, "t/k"); string(got) != "previous" {
		t.Errorf("object after truncated PUT = %q", got)
	}
}

// A BaseURL with a deeper path and a trailing slash: URLs have no double
// slash, and the handler serves under that path.
func TestFSHandlerNestedBasePath(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := newTestFS(t, func(c *objectstore.FSConfig) { c.BaseURL = "http://" + ln.Addr().String() + "/api/v1/objects/" })
	mux := http.NewServeMux()
	mux.Handle("/api/v1/objects/", fs.Handler())
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	ctx := context.Background()
	u, headers, err := fs.PresignPut(ctx, "n/k", time.Minute, 2, "text/plain", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, srv.URL+"/api/v1/objects/n/k?") {
		t.Fatalf("PUT URL %q", u)
	}
	if resp := httpPut(t, u, headers, []byte("hi")); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s", resp.Status)
	}
	g, _ := fs.PresignGet(ctx, "n/k", time.Minute)
	if resp, body := httpGet(t, g); resp.StatusCode != http.StatusOK || string(body) != "hi" {
		t.Fatalf("GET: %s %q", resp.Status, body)
	}
}

func TestFSHandlerPutKeyConflict(t *testing.T) {
	_, fs := newFSServer(t, nil)
	mustPut(t, fs, "a", []byte("object"), "")
	u, headers, err := fs.PresignPut(context.Background(), "a/b", time.Minute, 1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, "PUT below an object", httpPut(t, u, headers, []byte("x")), http.StatusConflict)
}

// A bounded PUT URL (PresignPutUpTo) takes any size up to its maximum and
// is bound to its key, maximum, expiry and content type; it is never an
// exact-size URL nor a GET URL.
func TestFSHandlerPutUpTo(t *testing.T) {
	clock := clocktest.NewFixed(time.Now().Truncate(time.Second))
	_, fs := newFSServer(t, func(c *objectstore.FSConfig) { c.Now = clock.Now; c.MaxPutBytes = 1 << 20 })
	ctx := context.Background()
	if _, _, err := fs.PresignPutUpTo(ctx, "out/x", time.Minute, 2<<20, ""); err == nil {
		t.Error("a maximum above MaxPutBytes was signed")
	}
	u, headers, err := fs.PresignPutUpTo(ctx, "out/x.bie", time.Minute, 100, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	put := func(u, ct string, body []byte, length int64) *http.Response {
		req, err := http.NewRequest(http.MethodPut, u, io.MultiReader(bytes.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		return do(t, req)
	}
	const ct = "application/octet-stream"
	expectStatus(t, "over the maximum", put(u, ct, make([]byte, 101), 101), http.StatusRequestEntityTooLarge)
	expectStatus(t, "no Content-Length", put(u, ct, []byte("chunked"), -1), http.StatusLengthRequired)
	expectStatus(t, "other content type", put(u, "text/plain", []byte("x"), 1), http.StatusForbidden)
	expectStatus(t, "maximum raised", put(withQuery(t, u, func(q url.Values) { q.Set("X-Max-Size", "1000") }), ct, make([]byte, 500), 500), http.StatusForbidden)
	expectStatus(t, "maximum as an exact size", put(withQuery(t, u, func(q url.Values) { q.Set("X-Size", q.Get("X-Max-Size")); q.Del("X-Max-Size") }), ct, make([]byte, 100), 100), http.StatusForbidden)
	expectStatus(t, "both sizes", put(withQuery(t, u, func(q url.Values) { q.Set("X-Size", "5") }), ct, make([]byte, 5), 5), http.StatusForbidden)
	expectStatus(t, "other key", put(strings.Replace(u, "/x.bie?", "/y.bie?", 1), ct, []byte("x"), 1), http.StatusForbidden)
	expectStatus(t, "bounded URL for GET", do(t, mustRequest(t, http.MethodGet, u)), http.StatusForbidden)
	if _, err := fs.Stat(ctx, "out/x.bie"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Fatalf("a refused PUT stored something: %v", err)
	}
	for _, body := range [][]byte{[]byte("a small output"), make([]byte, 100), {}} {
		resp := httpPut(t, u, headers, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT of %d bytes: %s %q", len(body), resp.Status, readBody(t, resp))
		}
		got, info := readAll(t, fs, "out/x.bie")
		if !bytes.Equal(got, body) || info.ContentType != ct {
			t.Errorf("stored %d bytes %+v, want %d", len(got), info, len(body))
		}
	}
	clock.Advance(time.Minute)
	expectStatus(t, "expired", put(u, ct, []byte("x"), 1), http.StatusForbidden)
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A PUT URL bound to a sha256 stores only that body: other bytes of the
// same size are refused and leave the object as it was, so a link used
// again after its upload can only write the same bytes; the digest cannot
// be taken off or changed.
func TestFSPresignedPutBoundToItsDigest(t *testing.T) {
	_, fs := newFSServer(t, nil)
	ctx := context.Background()
	data, other := []byte("the real result"), []byte("a forged result")
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	u, headers, err := fs.PresignPut(ctx, "results/r.json", time.Minute, int64(len(data)), "application/json", digest)
	if err != nil {
		t.Fatal(err)
	}
	put := func(u string, body []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodPut, u, bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", headers["Content-Type"])
		return do(t, req)
	}
	content := func() string {
		rc, _, err := fs.Open(ctx, "results/r.json")
		if err != nil {
			return "<" + err.Error() + ">"
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}

	expectStatus(t, "other bytes before the upload", put(u, other), http.StatusBadRequest)
	if _, err := fs.Stat(ctx, "results/r.json"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Fatalf("a refused body was stored: %v", err)
	}
	expectStatus(t, "the signed body", put(u, data), http.StatusOK)
	expectStatus(t, "other bytes after the upload", put(u, other), http.StatusBadRequest)
	expectStatus(t, "the signed body again", put(u, data), http.StatusOK)
	if got := content(); got != string(data) {
		t.Fatalf("object = %q, want %q", got, data)
	}
	otherSum := sha256.Sum256(other)
	expectStatus(t, "digest changed", put(withQuery(t, u, func(q url.Values) { q.Set("X-SHA256", hex.EncodeToString(otherSum[:])) }), other), http.StatusForbidden)
	expectStatus(t, "digest removed", put(withQuery(t, u, func(q url.Values) { q.Del("X-SHA256") }), other), http.StatusForbidden)
	if got := content(); got != string(data) {
		t.Fatalf("object = %q after refused uploads, want %q", got, data)
	}
	for _, bad := range []string{"xyz", strings.ToUpper(digest), digest[:63]} {
		if _, _, err := fs.PresignPut(ctx, "k", time.Minute, 1, "", bad); err == nil {
			t.Errorf("PresignPut took sha256 %q", bad)
		}
	}
}
