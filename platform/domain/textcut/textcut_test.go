package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBytes(t *testing.T) {
	cases := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short text is kept", "hello", 10, "hello"},
		{"exact size is kept", "hello", 5, "hello"},
		{"ASCII is cut at n", "hello world", 5, "hello"},
		{"a character is never split", "日本語", 4, "日"},
		{"a cut on a boundary keeps the characters before it", "日本語", 6, "日本"},
		{"invalid bytes become U+FFFD", "a\xffb", 10, "a\uFFFDb"},
		{"an invalid byte's replacement counts its three bytes", "ab\xff", 3, "ab"},
		{"nothing left at zero", "abc", 0, ""},
		{"a negative size is zero", "abc", -1, ""},
	}
	for _, c := range cases {
		if got := Bytes(c.in, c.n); got != c.want {
			t.Errorf("%s: Bytes(%q, %d) = %q, want %q", c.name, c.in, c.n, got, c.want)
		}
	}
}

func FuzzBytes(f *testing.F) {
	f.Add("日本語 and ASCII", 7)
	f.Add("a\xff\xfeb", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Bytes(s, n)
		if !utf8.ValidString(got) || len(got) > max(n, 0) {
			t.Fatalf("Bytes(%q, %d) = %q: not valid UTF-8 of at most n bytes", s, n, got)
		}
		if valid := strings.ToValidUTF8(s, "\uFFFD"); !strings.HasPrefix(valid, got) ||
			(len(valid) > max(n, 0) && len(got) < max(n, 0)-utf8.UTFMax+1) {
			t.Fatalf("Bytes(%q, %d) = %q: not the longest valid prefix", s, n, got)
		}
	})
}

func TestTail(t *testing.T) {
	cases := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short text is kept", "hello", 10, "hello"},
		{"the end of ASCII", "hello world", 5, "world"},
		{"a character is never split", "日本語", 4, "語"},
		{"a cut on a boundary keeps the characters after it", "日本語", 6, "本語"},
		{"invalid bytes become U+FFFD", "a\xffb", 10, "a\uFFFDb"},
		{"nothing left at zero", "abc", 0, ""},
		{"a negative size is zero", "abc", -1, ""},
	}
	for _, c := range cases {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("%s: Tail(%q, %d) = %q, want %q", c.name, c.in, c.n, got, c.want)
		}
	}
}
