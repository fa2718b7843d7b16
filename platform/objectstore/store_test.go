package objectstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

// storeSuite runs the behaviour every Store promises against one
// implementation. newStore returns a fresh, empty store.
func storeSuite(t *testing.T, newStore func(t *testing.T) objectstore.Store) {
	t.Run("PutOpenStat", func(t *testing.T) { testPutOpenStat(t, newStore(t)) })
	t.Run("DefaultAndInvalidContentType", func(t *testing.T) { testContentTypes(t, newStore(t)) })
	t.Run("UnknownSize", func(t *testing.T) { testUnknownSize(t, newStore(t)) })
	t.Run("EmptyObject", func(t *testing.T) { testEmptyObject(t, newStore(t)) })
	t.Run("WrongSizeStoresNothing", func(t *testing.T) { testWrongSize(t, newStore(t)) })
	t.Run("Overwrite", func(t *testing.T) { testOverwrite(t, newStore(t)) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, newStore(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, newStore(t)) })
	t.Run("InvalidKeys", func(t *testing.T) { testInvalidKeys(t, newStore(t)) })
	t.Run("CancelledContext", func(t *testing.T) { testCancelled(t, newStore(t)) })
	t.Run("ConcurrentPutsAtomic", func(t *testing.T) { testConcurrentPuts(t, newStore(t)) })
	t.Run("PresignedPutThenGet", func(t *testing.T) { testPresignedRoundTrip(t, newStore(t)) })
	t.Run("PresignArguments", func(t *testing.T) { testPresignArguments(t, newStore(t)) })
	t.Run("Copy", func(t *testing.T) { testCopy(t, newStore(t)) })
}

func testCopy(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	model := []byte("\x08\x08\x3a\x00 an onnx model")
	mustPut(t, s, "uploads/t1/model", model, "application/octet-stream")

	info, err := s.Copy(ctx, "uploads/t1/model", "jobs/j1/input/model.onnx")
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	checkInfo(t, "Copy", info, "jobs/j1/input/model.onnx", model, "application/octet-stream")
	got, oinfo := readAll(t, s, "jobs/j1/input/model.onnx")
	if !bytes.Equal(got, model) {
		t.Fatalf("copy reads %q, want %q", got, model)
	}
	checkInfo(t, "Open of the copy", oinfo, "jobs/j1/input/model.onnx", model, "application/octet-stream")

	// The copy is an object of its own: replacing or deleting the source
	// leaves it as it was, and replacing it leaves the source.
	mustPut(t, s, "uploads/t1/model", []byte("replaced"), "text/plain")
	if got, _ := readAll(t, s, "jobs/j1/input/model.onnx"); !bytes.Equal(got, model) {
		t.Fatalf("after the source was replaced the copy reads %q", got)
	}
	if _, err := s.Copy(ctx, "uploads/t1/model", "jobs/j2/input/model.onnx"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "jobs/j2/input/model.onnx", []byte("changed copy"), "text/plain")
	if got, _ := readAll(t, s, "uploads/t1/model"); string(got) != "replaced" {
		t.Fatalf("after the copy was replaced the source reads %q", got)
	}
	if err := s.Delete(ctx, "uploads/t1/model"); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, s, "jobs/j1/input/model.onnx"); !bytes.Equal(got, model) {
		t.Fatalf("after the source was deleted the copy reads %q", got)
	}

	// A copy over an existing object replaces it whole.
	quant := []byte("PK quant")
	mustPut(t, s, "uploads/t1/quant", quant, "application/zip")
	info, err = s.Copy(ctx, "uploads/t1/quant", "jobs/j1/input/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "Copy over an object", info, "jobs/j1/input/model.onnx", quant, "application/zip")
	if got, _ := readAll(t, s, "jobs/j1/input/model.onnx"); !bytes.Equal(got, quant) {
		t.Fatalf("the replaced copy reads %q", got)
	}

	// A copy onto itself changes nothing.
	info, err = s.Copy(ctx, "uploads/t1/quant", "uploads/t1/quant")
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "Copy onto itself", info, "uploads/t1/quant", quant, "application/zip")

	// A missing source is ErrNotFound and creates nothing; so is a prefix
	// of other keys, which is no object.
	for _, from := range []string{"uploads/t1/none", "jobs/j1"} {
		if _, err := s.Copy(ctx, from, "jobs/j3/input/model.onnx"); !errors.Is(err, objectstore.ErrNotFound) {
			t.Fatalf("Copy(%q) = %v, want ErrNotFound", from, err)
		}
	}
	if _, err := s.Stat(ctx, "jobs/j3/input/model.onnx"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Fatalf("a failed copy left an object: %v", err)
	}

	// Invalid keys on either side are refused.
	for _, c := range [][2]string{{"../escape", "jobs/j4/x"}, {"uploads/t1/quant", "/abs"}} {
		if _, err := s.Copy(ctx, c[0], c[1]); err == nil || errors.Is(err, objectstore.ErrNotFound) {
			t.Fatalf("Copy(%q, %q) = %v, want a key error", c[0], c[1], err)
		}
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustPut(t *testing.T, s objectstore.Store, key string, data []byte, ct string) objectstore.Info {
	t.Helper()
	info, err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), ct)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

func readAll(t *testing.T, s objectstore.Store, key string) ([]byte, objectstore.Info) {
	t.Helper()
	rc, info, err := s.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("Open(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return b, info
}

func checkInfo(t *testing.T, what string, got objectstore.Info, key string, data []byte, ct string) {
	t.Helper()
	if got.Key != key || got.Size != int64(len(data)) || got.ContentType != ct || got.SHA256 != sha(data) {
		t.Errorf("%s info = %+v; want key %q size %d type %q sha %s", what, got, key, len(data), ct, sha(data))
	}
	if got.ModTime.IsZero() || time.Since(got.ModTime) > time.Hour || time.Until(got.ModTime) > time.Hour {
		t.Errorf("%s ModTime %v is not about now", what, got.ModTime)
	}
}

func testPutOpenStat(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	key := "task-results/0190f1b2/output.json"
	data := []byte(`{"loss":0.125}`)
	info := mustPut(t, s, key, data, "application/json")
	checkInfo(t, "Put", info, key, data, "application/json")

	got, oinfo := readAll(t, s, key)
	if !bytes.Equal(got, data) {
		t.Errorf("Open content = %q, want %q", got, data)
	}
	checkInfo(t, "Open", oinfo, key, data, "application/json")

	sinfo, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	checkInfo(t, "Stat", sinfo, key, data, "application/json")

	// A body that is not a bytes.Reader (no Seek, no ReadAt), delivered in
	// small pieces.
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB
	info, err = s.Put(ctx, "big/one", iotest.HalfReader(bytes.NewReader(big)), int64(len(big)), "")
	if err != nil {
		t.Fatalf("Put big: %v", err)
	}
	checkInfo(t, "Put big", info, "big/one", big, objectstore.DefaultContentType)
	if got, _ := readAll(t, s, "big/one"); !bytes.Equal(got, big) {
		t.Errorf("big content differs (%d bytes, want %d)", len(got), len(big))
	}
}

func testContentTypes(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	info := mustPut(t, s, "ct/default", []byte("x"), "")
	if info.ContentType != objectstore.DefaultContentType {
		t.Errorf("default content type = %q", info.ContentType)
	}
	if st, err := s.Stat(ctx, "ct/default"); err != nil || st.ContentType != objectstore.DefaultContentType {
		t.Errorf("Stat = %+v, %v", st, err)
	}
	mustPut(t, s, "ct/params", []byte("x"), "text/plain; charset=utf-8")
	if st, err := s.Stat(ctx, "ct/params"); err != nil || st.ContentType != "text/plain; charset=utf-8" {
		t.Errorf("Stat = %+v, %v", st, err)
	}
	if _, err := s.Put(ctx, "ct/bad", strings.NewReader("x"), 1, "text/plain\r\nX-Injected: 1"); err == nil {
		t.Error("Put accepted a content type with CRLF")
	}
	if _, err := s.Stat(ctx, "ct/bad"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat after refused Put = %v, want ErrNotFound", err)
	}
}

func testUnknownSize(t *testing.T, s objectstore.Store) {
	data := bytes.Repeat([]byte("abc"), 100000)
	info, err := s.Put(context.Background(), "unknown/size", iotest.OneByteReader(io.LimitReader(bytes.NewReader(data), 1<<20)), -1, "text/plain")
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	checkInfo(t, "Put", info, "unknown/size", data, "text/plain")
	if got, _ := readAll(t, s, "unknown/size"); !bytes.Equal(got, data) {
		t.Errorf("content differs")
	}
}

func testEmptyObject(t *testing.T, s objectstore.Store) {
	info := mustPut(t, s, "empty", nil, "")
	checkInfo(t, "Put", info, "empty", nil, objectstore.DefaultContentType)
	got, oinfo := readAll(t, s, "empty")
	if len(got) != 0 || oinfo.Size != 0 {
		t.Errorf("empty object read %q, info %+v", got, oinfo)
	}
}

func testWrongSize(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		body string
		size int64
	}{{"short", "12345", 10}, {"long", "1234567890abc", 10}, {"negative", "x", -2}} {
		key := "wrong/" + c.name
		if _, err := s.Put(ctx, key, strings.NewReader(c.body), c.size, ""); err == nil {
			t.Errorf("%s: Put succeeded", c.name)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, objectstore.ErrNotFound) {
			t.Errorf("%s: Stat after failed Put = %v, want ErrNotFound", c.name, err)
		}
		// A failed replacement leaves the previous object intact.
		mustPut(t, s, key, []byte("old"), "text/plain")
		if _, err := s.Put(ctx, key, strings.NewReader(c.body), c.size, ""); err == nil {
			t.Errorf("%s: replacing Put succeeded", c.name)
		}
		if got, info := readAll(t, s, key); string(got) != "old" || info.ContentType != "text/plain" {
			t.Errorf("%s: after failed replace got %q %+v, want the old object", c.name, got, info)
		}
	}
}

func testOverwrite(t *testing.T, s objectstore.Store) {
	mustPut(t, s, "over/k", []byte("first version"), "text/plain")
	mustPut(t, s, "over/k", []byte("v2"), "application/json")
	got, info := readAll(t, s, "over/k")
	if string(got) != "v2" {
		t.Errorf("content = %q", got)
	}
	checkInfo(t, "Open", info, "over/k", []byte("v2"), "application/json")
}

func testMissing(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	if _, _, err := s.Open(ctx, "no/such/key"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Open missing = %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "no/such/key"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat missing = %v, want ErrNotFound", err)
	}
	// A "directory" of other keys is not an object either.
	mustPut(t, s, "dir/child", []byte("x"), "")
	if _, err := s.Stat(ctx, "dir"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat of a key prefix = %v, want ErrNotFound", err)
	}
}

func testDelete(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Errorf("Delete missing = %v, want nil", err)
	}
	mustPut(t, s, "del/k", []byte("x"), "")
	if err := s.Delete(ctx, "del/k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Stat(ctx, "del/k"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "del/k"); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
	// After deleting the only key below "del", "del" itself can be a key.
	mustPut(t, s, "del", []byte("now a key"), "")
	if got, _ := readAll(t, s, "del"); string(got) != "now a key" {
		t.Errorf("content = %q", got)
	}
}

func testInvalidKeys(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	for _, key := range []string{"", "../escape", "a/../../b", "/abs", "a//b", "a/./b", "sp ace", "..", "a\\..\\b"} {
		_, err := s.Put(ctx, key, strings.NewReader("x"), 1, "")
		check := func(op string, err error) {
			if !errors.Is(err, objectstore.ErrInvalidKey) {
				t.Errorf("%s(%q) = %v, want ErrInvalidKey", op, key, err)
			}
		}
		check("Put", err)
		_, _, err = s.Open(ctx, key)
		check("Open", err)
		_, err = s.Stat(ctx, key)
		check("Stat", err)
		check("Delete", s.Delete(ctx, key))
		_, err = s.PresignGet(ctx, key, time.Minute)
		check("PresignGet", err)
		_, _, err = s.PresignPut(ctx, key, time.Minute, 1, "", "")
		check("PresignPut", err)
	}
}

func testCancelled(t *testing.T, s objectstore.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, "cancelled", strings.NewReader("x"), 1, ""); err == nil {
		t.Error("Put with cancelled context succeeded")
	}
	if _, err := s.Stat(context.Background(), "cancelled"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat after cancelled Put = %v, want ErrNotFound", err)
	}

	// Cancelled while the body is still streaming.
	ctx, cancel = context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	go func() {
		pw.Write(bytes.Repeat([]byte("x"), 1000))
		cancel()
		pw.Write(bytes.Repeat([]byte("y"), 1000))
		pw.Close()
	}()
	if _, err := s.Put(ctx, "cancelled", pr, 2000, ""); err == nil {
		t.Error("Put cancelled mid-body succeeded")
	}
	pr.CloseWithError(errors.New("test done"))
	if _, err := s.Stat(context.Background(), "cancelled"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat after cancelled Put = %v, want ErrNotFound", err)
	}
}

// testConcurrentPuts races writers of different, self-describing versions
// of one key against readers. Every read must be one whole version: all
// bytes the same letter, as long as that version, with the version's hash.
func testConcurrentPuts(t *testing.T, s objectstore.Store) {
	const key = "race/key"
	const writers, rounds, readers = 4, 6, 3
	version := func(w int) []byte { return bytes.Repeat([]byte{byte('a' + w)}, 32<<10*(w+1)) }
	mustPut(t, s, key, version(0), "")

	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, writers*rounds+readers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := version(w)
			for range rounds {
				if _, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), ""); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	var rwg sync.WaitGroup
	reads := make([]int, readers)
	for r := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			// Read until the writers are done, and at least once.
			deadline := time.Now().Add(10 * time.Second)
			for {
				select {
				case <-stop:
					if reads[r] > 0 || time.Now().After(deadline) {
						return
					}
				default:
				}
				rc, info, err := s.Open(ctx, key)
				if err != nil {
					// S3 may report a replaced object between HEAD and GET
					// (If-Match); that is a refused read, not a torn one.
					continue
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					continue
				}
				reads[r]++
				w := int(b[0] - 'a')
				if w < 0 || w >= writers || !bytes.Equal(b, version(w)) || info.Size != int64(len(b)) || info.SHA256 != sha(b) {
					errs <- fmt.Errorf("reader %d saw a torn object: %d bytes starting %q, info %+v", r, len(b), b[:1], info)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for r, n := range reads {
		if n == 0 {
			t.Errorf("reader %d completed no read", r)
		}
	}
	got, info := readAll(t, s, key)
	w := int(got[0] - 'a')
	checkInfo(t, "final", info, key, version(w), objectstore.DefaultContentType)
}

// httpPut uploads body to a presigned PUT URL with the returned headers,
// as an executor would.
func httpPut(t *testing.T, url string, headers map[string]string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Content-Length" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("Content-Length header %q: %v", v, err)
			}
			req.ContentLength = n
			continue
		}
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func httpGet(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := do(t, req)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func testPresignedRoundTrip(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	key := "presigned/result.bin"
	data := bytes.Repeat([]byte{0, 1, 2, 3, 254, 255}, 5000)
	u, headers, err := s.PresignPut(ctx, key, time.Minute, int64(len(data)), "application/x-tar", "")
	if err != nil {
		t.Fatalf("PresignPut: %v", err)
	}
	if headers["Content-Type"] != "application/x-tar" || headers["Content-Length"] != strconv.Itoa(len(data)) {
		t.Errorf("PresignPut headers = %v", headers)
	}
	resp := httpPut(t, u, headers, data)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("presigned PUT: %s %s", resp.Status, b)
	}
	st, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatalf("Stat after presigned PUT: %v", err)
	}
	if st.Size != int64(len(data)) || st.ContentType != "application/x-tar" {
		t.Errorf("Stat after presigned PUT = %+v", st)
	}

	g, err := s.PresignGet(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("PresignGet: %v", err)
	}
	resp, body := httpGet(t, g)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("presigned GET: %s, %d bytes (want %d)", resp.Status, len(body), len(data))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-tar" {
		t.Errorf("presigned GET Content-Type = %q", ct)
	}

	// An empty content type is signed (and must be sent) as the default.
	u, headers, err = s.PresignPut(ctx, "presigned/default-type", time.Minute, 3, "", "")
	if err != nil {
		t.Fatalf("PresignPut: %v", err)
	}
	if headers["Content-Type"] != objectstore.DefaultContentType {
		t.Errorf("headers = %v", headers)
	}
	if resp := httpPut(t, u, headers, []byte("abc")); resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: %s", resp.Status)
	}
}

func testPresignArguments(t *testing.T, s objectstore.Store) {
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, -time.Second, 500 * time.Millisecond, objectstore.MaxPresignTTL + time.Second} {
		if _, err := s.PresignGet(ctx, "k", ttl); err == nil {
			t.Errorf("PresignGet ttl %v accepted", ttl)
		}
		if _, _, err := s.PresignPut(ctx, "k", ttl, 1, "", ""); err == nil {
			t.Errorf("PresignPut ttl %v accepted", ttl)
		}
	}
	if _, err := s.PresignGet(ctx, "k", objectstore.MaxPresignTTL); err != nil {
		t.Errorf("PresignGet max ttl: %v", err)
	}
	if _, _, err := s.PresignPut(ctx, "k", time.Minute, -1, "", ""); err == nil {
		t.Error("PresignPut size -1 accepted")
	}
	if _, _, err := s.PresignPut(ctx, "k", time.Minute, 1, "not a type", ""); err == nil {
		t.Error("PresignPut bad content type accepted")
	}
}
