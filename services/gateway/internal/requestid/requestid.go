// Package requestid carries the correlation id of a request through the
// gateway: accepted from the client when it is sane, generated otherwise,
// echoed on the HTTP response and sent to internal services as metadata.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

const (
	// Header is the HTTP header that carries the id both ways.
	Header = "X-Request-Id"
	// MetadataKey is the gRPC metadata key internal services receive.
	MetadataKey = "x-request-id"
	// maxLen bounds what a client may choose; longer values are replaced,
	// not truncated, so a truncated id never collides with another.
	maxLen = 128
)

// Valid reports whether a client-chosen id is safe to log and forward:
// 1–128 characters of letters, digits and . _ : -. Anything else (spaces,
// control characters, quotes) could break log lines or metadata.
func Valid(id string) bool {
	if id == "" || len(id) > maxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// New returns a fresh id: a random (version 4) UUID in its 36-character
// form, the shape the API's documents show their request ids in.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // never fails; see crypto/rand.Read
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // the RFC 9562 variant
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	hex.Encode(out[9:13], b[4:6])
	hex.Encode(out[14:18], b[6:8])
	hex.Encode(out[19:23], b[8:10])
	hex.Encode(out[24:], b[10:])
	out[8], out[13], out[18], out[23] = '-', '-', '-', '-'
	return string(out[:])
}

// Ensure returns id if it is Valid, else a new one.
func Ensure(id string) string {
	if Valid(id) {
		return id
	}
	return New()
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the id carried by ctx, or "".
func FromContext(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}
