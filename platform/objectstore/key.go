package objectstore

import (
	"fmt"
	"strings"
)

// MaxKeyLen is the longest key in bytes; it is S3's limit, so with an
// S3Config.Prefix the usable length is shorter by the prefix.
const MaxKeyLen = 1024

// ValidateKey reports whether key is acceptable (ErrInvalidKey wrapped with
// why). The alphabet is deliberately tiny: every such key is a safe relative
// file path, needs no escaping in a URL path or an S3 key, and cannot smuggle
// in a separator, a NUL, a percent-escape or a Unicode look-alike. "." and
// ".." segments are refused, so a key never climbs out of the store's root
// or aliases another key after path cleaning; ".." inside a name
// ("model..pt") is an ordinary file name, since "/" is the only separator
// the alphabet has.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	if key[0] == '/' {
		return fmt.Errorf("%w: %q starts with /", ErrInvalidKey, key)
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Errorf("%w: %q has byte %q at %d (allowed: A-Z a-z 0-9 . _ - and / between segments)", ErrInvalidKey, key, key[i], i)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
		case ".", "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, key, seg)
		}
	}
	return nil
}

func keyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == '-', c == '/':
		return true
	}
	return false
}
