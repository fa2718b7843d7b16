// Package textcut bounds text to a size in bytes, for the fields whose
// limit the APIs state in bytes (an outcome's error, a progress message, a
// failure reason), as valid UTF-8 that never ends inside a character. Limits
// stated in characters (names, prompts) count runes instead, where they are
// checked.
//
// It is pure, and sits under platform/domain so that the scheduler's
// domain packages and the executor cut text by the one rule.
package textcut

import (
	"strings"
	"unicode/utf8"
)

// Bytes returns s as valid UTF-8 (each invalid byte sequence replaced by
// U+FFFD) cut to at most n bytes on a character boundary.
func Bytes(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:max(n, 0)]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Tail returns the end of s as valid UTF-8 (as Bytes), at most n bytes,
// starting on a character boundary: what is kept of a long stream.
func Tail(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[len(s)-max(n, 0):]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
