// Package clientip decides which address a request came from. By default it
// is the TCP peer: a client can write any X-Forwarded-For it likes, and the
// address matters (agent tokens are bound to it). Only when the peer is one
// of the configured trusted proxies is X-Forwarded-For read, from the right
// (the entry the nearest proxy appended) leftwards, skipping further trusted
// proxies; the first address that is not a trusted proxy is the client.
package clientip

import (
	"net/netip"
	"strings"
)

// Resolve returns the client address of a request whose TCP peer is
// peerAddr ("host:port" or a bare address) and which carries the given
// X-Forwarded-For header values. It returns "" when the address cannot be
// known (unparsable peer, or a malformed entry reached through trusted
// proxies); callers refuse what needs an address rather than guess.
func Resolve(peerAddr string, xff []string, trusted []netip.Prefix) string {
	ip, ok := parse(peerAddr)
	if !ok {
		return ""
	}
	if !isTrusted(ip, trusted) {
		return ip.String()
	}
	var hops []string
	for _, v := range xff {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parse(strings.TrimSpace(hops[i]))
		if !ok {
			return ""
		}
		ip = hop
		if !isTrusted(ip, trusted) {
			return ip.String()
		}
	}
	// Every hop is a trusted proxy: the leftmost is as close to the client
	// as we can know.
	return ip.String()
}

func isTrusted(ip netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// parse accepts "host:port", "[v6]:port" and bare addresses, and returns
// IPv4-mapped IPv6 addresses in their IPv4 form.
func parse(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}
