package pg

import (
	"strings"
	"unicode/utf8"
)

// CleanText returns s as a text column of a UTF-8 database can hold it:
// every NUL character and every byte that is not part of valid UTF-8
// becomes U+FFFD, the replacement character. PostgreSQL refuses both
// ("invalid byte sequence for encoding UTF8: 0x00"), and a projection that
// wrote such a value as it came would fail on that record for ever.
//
// The result depends on s alone, so a projection that cleans its values in
// its convert step writes the same rows live and on replay. A string that
// needs no cleaning is returned as it is, without copying.
func CleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
