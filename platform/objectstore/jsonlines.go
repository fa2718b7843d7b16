package objectstore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// MaxJSONLine bounds one line of a JSON Lines object read back: archives
// hold event payloads (at most eventstore.MaxPayload, base64) and audit
// details, both well under it.
const MaxJSONLine = 16 << 20

// gzipMagic opens every gzip stream; a JSON line never starts with it.
var gzipMagic = []byte{0x1f, 0x8b}

// PutJSONLines writes items to key as JSON Lines, one value a line,
// gzip-compressed when compress. Archives of the event history and of the
// audit log use it (docs/operations.md, "Database size").
func PutJSONLines[T any](ctx context.Context, s Store, key string, items []T, compress bool) error {
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if compress {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	contentType := "application/x-ndjson"
	if zw != nil {
		if err := zw.Close(); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		contentType = "application/gzip"
	}
	_, err := s.Put(ctx, key, &buf, int64(buf.Len()), contentType)
	return err
}

// ReadJSONLines reads a JSON Lines object back, gzip-compressed or not
// (told by its first bytes), and calls each with every line decoded, in
// order. A line that is not a T fails the read with its line number.
func ReadJSONLines[T any](ctx context.Context, s Store, key string, each func(T) error) error {
	body, _, err := s.Open(ctx, key)
	if err != nil {
		return err
	}
	defer body.Close()
	br := bufio.NewReader(body)
	var r io.Reader = br
	if head, _ := br.Peek(len(gzipMagic)); bytes.Equal(head, gzipMagic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxJSONLine)
	for n := 1; sc.Scan(); n++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("%s line %d: %w", key, n, err)
		}
		if err := each(v); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}
