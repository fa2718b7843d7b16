package postgres

import (
	"testing"
	"time"
)

// FuzzPageToken decodes arbitrary page tokens: nothing panics, anything
// accepted names a time and an id, and encoding those gives a token that
// decodes to the same.
func FuzzPageToken(f *testing.F) {
	for _, s := range []string{
		encodeToken(time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC), "task-001"),
		encodeToken(time.Unix(0, 0), "a|b"), "", "%00%ff..%2f", "AAAA", "MjAyNi0xMS0yMlQxMjowMDowMFp8", "!!!",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		at, id, err := decodeToken(tok)
		if err != nil {
			return
		}
		if id == "" {
			t.Fatalf("token %q decodes with an empty id", tok)
		}
		at2, id2, err := decodeToken(encodeToken(at, id))
		if err != nil || !at2.Equal(at) || id2 != id {
			t.Fatalf("token %q: (%s, %q) re-encoded gives (%s, %q), %v", tok, at, id, at2, id2, err)
		}
	})
}
