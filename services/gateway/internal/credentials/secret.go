package credentials

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Bearer string layout: <scheme><prefix>_<secret>.
const (
	userScheme  = "tm_"
	agentScheme = "tma_"
	adminScheme = "tmo_"
	prefixLen   = 8
	// secretLen is base64url (unpadded) of 32 random bytes.
	secretLen   = 43
	secretBytes = 32
)

// credKind is which table a bearer string belongs to.
type credKind int

const (
	kindUser credKind = iota + 1
	kindAgent
	kindAdmin
)

// newSecret returns a fresh bearer string for scheme, its lookup prefix and
// the hash to store.
func newSecret(scheme string) (bearer, prefix string, hash []byte) {
	prefix = newPrefix()
	b := make([]byte, secretBytes)
	// crypto/rand.Read never returns an error (it panics if the system's
	// source fails, which is the right outcome for a credential issuer).
	_, _ = rand.Read(b)
	bearer = scheme + prefix + "_" + base64.RawURLEncoding.EncodeToString(b)
	return bearer, prefix, hashBearer(bearer)
}

// newPrefix returns 8 random lower-case base32 characters (40 bits): enough
// to make collisions rare (the unique constraint catches the rest), short
// enough to read in a log line.
func newPrefix() string {
	return strings.ToLower(rand.Text()[:prefixLen])
}

// newID returns an identifier with the given prefix and 130 random bits.
func newID(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}

func hashBearer(bearer string) []byte {
	sum := sha256.Sum256([]byte(bearer))
	return sum[:]
}

// parseBearer checks the shape of a bearer string and returns its kind and
// lookup prefix. Shape errors are caught here so malformed input never
// reaches the database.
func parseBearer(bearer string) (credKind, string, bool) {
	var kind credKind
	var rest string
	switch {
	case strings.HasPrefix(bearer, agentScheme):
		kind, rest = kindAgent, bearer[len(agentScheme):]
	case strings.HasPrefix(bearer, adminScheme):
		kind, rest = kindAdmin, bearer[len(adminScheme):]
	case strings.HasPrefix(bearer, userScheme):
		kind, rest = kindUser, bearer[len(userScheme):]
	default:
		return 0, "", false
	}
	if len(rest) != prefixLen+1+secretLen || rest[prefixLen] != '_' {
		return 0, "", false
	}
	prefix, secret := rest[:prefixLen], rest[prefixLen+1:]
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return 0, "", false
		}
	}
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return 0, "", false
		}
	}
	return kind, prefix, true
}

// FromAuthorization returns the secret of an Authorization header (or
// metadata) value "Bearer <secret>"; the scheme is case-insensitive
// (RFC 6750). ok is false when the value is missing or uses another scheme.
func FromAuthorization(value string) (secret string, ok bool) {
	scheme, secret, found := strings.Cut(value, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret = strings.TrimSpace(secret)
	return secret, secret != ""
}
