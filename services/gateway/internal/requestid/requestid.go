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

// New returns a fresh id: 32 hex digits (128 random bits).
func New() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails; see crypto/rand.Read
	return hex.EncodeToString(b)
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
