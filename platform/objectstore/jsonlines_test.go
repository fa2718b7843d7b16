package objectstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

type jsonLine struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

func TestJSONLinesRoundTripGzipAndPlain(t *testing.T) {
	ctx := context.Background()
	fs, _ := newTestFS(t)
	items := []jsonLine{{1, "a"}, {2, "b\nc"}, {3, "日本"}}
	for _, compress := range []bool{true, false} {
		key := "archive/x.jsonl"
		if compress {
			key += ".gz"
		}
		if err := objectstore.PutJSONLines(ctx, fs, key, items, compress); err != nil {
			t.Fatal(err)
		}
		st, err := fs.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: "application/gzip", false: "application/x-ndjson"}[compress]; st.ContentType != want {
			t.Errorf("compress=%v: content type %q, want %q", compress, st.ContentType, want)
		}
		var got []jsonLine
		if err := objectstore.ReadJSONLines(ctx, fs, key, func(l jsonLine) error { got = append(got, l); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(items) || got[0] != items[0] || got[1] != items[1] || got[2] != items[2] {
			t.Errorf("compress=%v: read back %v, want %v", compress, got, items)
		}
	}
}

func TestReadJSONLinesRefusesABadLineAndStopsOnTheCallersError(t *testing.T) {
	ctx := context.Background()
	fs, _ := newTestFS(t)
	body := "{\"n\":1}\nnot json\n"
	if _, err := fs.Put(ctx, "bad.jsonl", strings.NewReader(body), int64(len(body)), "application/x-ndjson"); err != nil {
		t.Fatal(err)
	}
	err := objectstore.ReadJSONLines(ctx, fs, "bad.jsonl", func(jsonLine) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl line 2") {
		t.Fatalf("bad line: %v, want an error naming line 2", err)
	}
	stop := errors.New("stop")
	calls := 0
	err = objectstore.ReadJSONLines(ctx, fs, "bad.jsonl", func(jsonLine) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("caller's error: %v after %d calls, want stop after 1", err, calls)
	}
	if err := objectstore.ReadJSONLines(ctx, fs, "missing.jsonl", func(jsonLine) error { return nil }); err == nil {
		t.Fatal("a missing object read without error")
	}
}
