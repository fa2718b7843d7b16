package objectstore

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestExactReader(t *testing.T) {
	cases := []struct {
		name    string
		body    io.Reader
		size    int64
		want    string
		wantErr error
	}{
		{"exact", strings.NewReader("hello"), 5, "hello", nil},
		{"exact one byte at a time", iotest.OneByteReader(strings.NewReader("hello")), 5, "hello", nil},
		{"exact with data+EOF", iotest.DataErrReader(strings.NewReader("hello")), 5, "hello", nil},
		{"empty", strings.NewReader(""), 0, "", nil},
		{"short", strings.NewReader("hell"), 5, "", errSizeMismatch},
		{"long", strings.NewReader("hello!"), 5, "", errSizeMismatch},
		{"empty but body", strings.NewReader("x"), 0, "", errSizeMismatch},
		{"body error", io.MultiReader(strings.NewReader("he"), iotest.ErrReader(io.ErrClosedPipe)), 5, "", io.ErrClosedPipe},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := io.ReadAll(newExactReader(c.body, c.size))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// A consumer that stops after the declared size (as minio-go does) must
// still learn about surplus bytes: the last bytes are withheld.
func TestExactReaderSurplusSeenByLimitedConsumer(t *testing.T) {
	r := newExactReader(strings.NewReader("hello world"), 5)
	var buf bytes.Buffer
	_, err := io.CopyN(&buf, r, 5)
	if !errors.Is(err, errSizeMismatch) {
		t.Fatalf("CopyN err = %v, want errSizeMismatch", err)
	}
}

func TestNormalizeContentType(t *testing.T) {
	for in, want := range map[string]string{
		"":                          DefaultContentType,
		"text/plain":                "text/plain",
		"text/plain; charset=utf-8": "text/plain; charset=utf-8",
	} {
		if got, err := normalizeContentType(in); err != nil || got != want {
			t.Errorf("normalizeContentType(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"text", "text/plain\r\nX-Evil: 1", "tëxt/plain", "/", strings.Repeat("a", 300) + "/b"} {
		if _, err := normalizeContentType(bad); err == nil {
			t.Errorf("normalizeContentType(%q) accepted", bad)
		}
	}
}
