package clientip

import (
	"net/netip"
	"testing"
)

func TestResolve(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		peer    string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{name: "peer only", peer: "192.0.2.1:5555", want: "192.0.2.1"},
		{name: "xff ignored without trusted proxies", peer: "192.0.2.1:5555", xff: []string{"203.0.113.9"}, want: "192.0.2.1"},
		{name: "xff ignored from an untrusted peer", peer: "192.0.2.1:5555", xff: []string{"203.0.113.9"}, trusted: trusted, want: "192.0.2.1"},
		{name: "trusted proxy", peer: "10.0.0.2:80", xff: []string{"203.0.113.9"}, trusted: trusted, want: "203.0.113.9"},
		{name: "spoofed left entries are skipped", peer: "10.0.0.2:80", xff: []string{"1.1.1.1, 203.0.113.9"}, trusted: trusted, want: "203.0.113.9"},
		{name: "chain of trusted proxies", peer: "10.0.0.2:80", xff: []string{"203.0.113.9, 10.9.9.9", "10.1.1.1"}, trusted: trusted, want: "203.0.113.9"},
		{name: "all trusted", peer: "10.0.0.2:80", xff: []string{"10.3.3.3"}, trusted: trusted, want: "10.3.3.3"},
		{name: "trusted peer without xff", peer: "10.0.0.2:80", trusted: trusted, want: "10.0.0.2"},
		{name: "garbage behind trusted proxies", peer: "10.0.0.2:80", xff: []string{"nonsense"}, trusted: trusted, want: ""},
		{name: "garbage left of the client is ignored", peer: "10.0.0.2:80", xff: []string{"nonsense, 203.0.113.9"}, trusted: trusted, want: "203.0.113.9"},
		{name: "ipv6 peer", peer: "[2001:db8::1]:443", want: "2001:db8::1"},
		{name: "mapped ipv4 peer", peer: "[::ffff:192.0.2.1]:443", want: "192.0.2.1"},
		{name: "bare address", peer: "192.0.2.1", want: "192.0.2.1"},
		{name: "unparsable peer", peer: "pipe", want: ""},
	}
	for _, tt := range tests {
		if got := Resolve(tt.peer, tt.xff, tt.trusted); got != tt.want {
			t.Errorf("%s: Resolve = %q, want %q", tt.name, got, tt.want)
		}
	}
}
