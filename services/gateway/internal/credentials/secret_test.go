package credentials

import (
	"strings"
	"testing"
)

func TestNewSecretShape(t *testing.T) {
	for _, scheme := range []string{userScheme, agentScheme, adminScheme} {
		bearer, prefix, hash := newSecret(scheme)
		if !strings.HasPrefix(bearer, scheme+prefix+"_") {
			t.Errorf("bearer %q does not start with %q", bearer[:len(scheme)+prefixLen], scheme+prefix+"_")
		}
		if got, want := len(bearer), len(scheme)+prefixLen+1+secretLen; got != want {
			t.Errorf("len(bearer) = %d, want %d", got, want)
		}
		if len(hash) != 32 {
			t.Errorf("len(hash) = %d, want 32", len(hash))
		}
		kind, p, ok := parseBearer(bearer)
		wantKind := map[string]credKind{userScheme: kindUser, agentScheme: kindAgent, adminScheme: kindAdmin}[scheme]
		if !ok || p != prefix || kind != wantKind {
			t.Errorf("parseBearer(new %s secret) = %v, %q, %v", scheme, kind, p, ok)
		}
	}
	a, _, _ := newSecret(userScheme)
	b, _, _ := newSecret(userScheme)
	if a == b {
		t.Error("two secrets are equal")
	}
}

func TestParseBearer(t *testing.T) {
	secret := strings.Repeat("A", secretLen)
	tests := []struct {
		in         string
		wantKind   credKind
		wantPrefix string
		wantOK     bool
	}{
		{in: "tm_abcdefgh_" + secret, wantKind: kindUser, wantPrefix: "abcdefgh", wantOK: true},
		{in: "tma_abcd2345_" + secret, wantKind: kindAgent, wantPrefix: "abcd2345", wantOK: true},
		{in: "tmo_abcd2345_" + secret, wantKind: kindAdmin, wantPrefix: "abcd2345", wantOK: true},
		{in: "tmo_abcd2345" + secret},
		{in: "tm_abcdefgh_" + strings.Repeat("-_9z", 10) + "abc", wantKind: kindUser, wantPrefix: "abcdefgh", wantOK: true},
		{in: ""},
		{in: "Bearer tm_abcdefgh_" + secret},
		{in: "tm_abcdefgh_" + secret + "x"},
		{in: "tm_abcdefgh_" + secret[1:]},
		{in: "tm_abcdefgh-" + secret},
		{in: "tm_ABCDEFGH_" + secret},
		{in: "tm_abcdefg1_" + secret}, // 1 is not base32
		{in: "tm_abcdefgh_" + secret[1:] + "="},
		{in: "tmx_abcdefgh_" + secret},
		{in: "tm_abcdefgh_" + secret[1:] + "é"},
	}
	for _, tt := range tests {
		kind, prefix, ok := parseBearer(tt.in)
		if ok != tt.wantOK || kind != tt.wantKind || prefix != tt.wantPrefix {
			t.Errorf("parseBearer(%q) = %v, %q, %v; want %v, %q, %v", tt.in, kind, prefix, ok, tt.wantKind, tt.wantPrefix, tt.wantOK)
		}
	}
}

func TestFromAuthorization(t *testing.T) {
	tests := []struct {
		in, want string
		wantOK   bool
	}{
		{in: "Bearer tm_x", want: "tm_x", wantOK: true},
		{in: "bearer  tm_x ", want: "tm_x", wantOK: true},
		{in: "BEARER tm_x", want: "tm_x", wantOK: true},
		{in: ""},
		{in: "Bearer"},
		{in: "Bearer "},
		{in: "Basic dXNlcjpwYXNz"},
		{in: "tm_x"},
	}
	for _, tt := range tests {
		got, ok := FromAuthorization(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("FromAuthorization(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}
