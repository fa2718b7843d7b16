package pg

import "testing"

func TestCleanText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"一只猫", "一只猫"},
		{"x\x00", "x\uFFFD"},
		{"\x00\x00", "\uFFFD\uFFFD"},
		{"a\xffb", "a\uFFFDb"},
		{"a\xff\xfeb", "a\uFFFDb"}, // one run of invalid bytes, one replacement
		{"\xc3", "\uFFFD"},         // a truncated sequence
		{"ok\uFFFD", "ok\uFFFD"},   // already a replacement character
	}
	for _, tt := range tests {
		if got := CleanText(tt.in); got != tt.want {
			t.Errorf("CleanText(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := CleanText(CleanText(tt.in)); got != tt.want {
			t.Errorf("CleanText is not idempotent on %q: %q", tt.in, got)
		}
	}
}
