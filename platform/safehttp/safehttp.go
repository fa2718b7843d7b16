// Package safehttp makes the HTTP clients Taskmesh uses for addresses its
// users choose — webhook receivers, the first frames of video generations —
// without letting them reach the machines behind Taskmesh (server-side
// request forgery). The check runs in the dialer, after the name was
// resolved, on the very address the connection goes to: a name that
// resolves to a public address when a task is submitted and to 127.0.0.1
// when it is called, or a redirect to an internal host, is refused all the
// same. Proxies are not used (a proxy would connect on the client's
// behalf, past the check).
//
// Refused are loopback, private (RFC 1918, fc00::/7), link-local (cloud
// metadata lives at 169.254.169.254), shared (100.64.0.0/10), unspecified,
// multicast and other special-purpose IPv4 addresses, unless the operator
// allow-lists their network. An IPv6 address that carries an IPv4 one a
// gateway translates to (NAT64, 6to4) is judged by the IPv4 address it
// reaches; the tunnels and translations that cannot be judged that way
// (Teredo, local-use NAT64, IPv4-compatible addresses) are refused.
package safehttp

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrRefused is wrapped by every refusal of an address.
var ErrRefused = errors.New("the address is not public and not allow-listed")

var (
	// notPublic4 are IPv4 networks that are global unicast to package
	// netip but reach no public host: "this network" (0/8, which Linux
	// dials as the local host), the shared address space of RFC 6598
	// (private in practice), IETF protocol assignments, benchmarking and
	// the reserved 240/4.
	notPublic4 = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("192.0.0.0/24"),
		netip.MustParsePrefix("198.18.0.0/15"),
		netip.MustParsePrefix("240.0.0.0/4"),
	}
	// nat64 (RFC 6052) carries the IPv4 address in its last 32 bits;
	// sixToFour (RFC 3056) in the 32 bits after its prefix.
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// Refused whatever they carry: local-use NAT64 (RFC 8215, meant for
	// private IPv4 networks), Teredo (its client address is obfuscated)
	// and the deprecated IPv4-compatible addresses (::a.b.c.d).
	opaque6 = []netip.Prefix{
		netip.MustParsePrefix("64:ff9b:1::/48"),
		netip.MustParsePrefix("2001::/32"),
		netip.MustParsePrefix("::/96"),
	}
)

// Public reports whether a is a public unicast address.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	if a.Is4() {
		for _, n := range notPublic4 {
			if n.Contains(a) {
				return false
			}
		}
		return true
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return Public(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(a):
		return Public(netip.AddrFrom4([4]byte(b[2:6])))
	}
	for _, n := range opaque6 {
		if n.Contains(a) {
			return false
		}
	}
	return true
}

// Policy decides which addresses may be dialed.
type Policy struct {
	// Allow lists networks that may be dialed although they are not
	// public (e.g. 10.20.0.0/16 for receivers inside the company).
	Allow []netip.Prefix
	// AllowAll turns the check off: development machines and tests only.
	AllowAll bool
}

// Permits reports whether a may be dialed.
func (p Policy) Permits(a netip.Addr) bool {
	a = a.Unmap()
	if p.AllowAll || Public(a) {
		return true
	}
	for _, n := range p.Allow {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// Control is a net.Dialer Control function that refuses what p does not
// permit; it runs after resolution, for each address tried.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrRefused, address)
	}
	if !p.Permits(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrRefused, ap.Addr())
	}
	return nil
}

// ParseAllow parses a comma-separated list of CIDR networks or single
// addresses, e.g. "10.20.0.0/16,192.168.1.7".
func ParseAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a network (10.0.0.0/8) nor an address", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Options configure NewClient.
type Options struct {
	Policy Policy
	// Timeout bounds a whole request, connection to last byte (default 10s).
	Timeout time.Duration
	// MaxRedirects is how many redirects are followed (each to an http(s)
	// URL, each checked like the first address); 0 follows none, and the
	// redirect is the answer.
	MaxRedirects int
	// MaxConnsPerHost bounds the connections to one host (0: no bound).
	MaxConnsPerHost int
}

// NewClient returns a client that dials only what o.Policy permits.
func NewClient(o Options) *http.Client {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	dialer := &net.Dialer{Timeout: o.Timeout, Control: o.Policy.Control}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   o.Timeout,
		ResponseHeaderTimeout: o.Timeout,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		MaxConnsPerHost:       o.MaxConnsPerHost,
		IdleConnTimeout:       60 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: transport, Timeout: o.Timeout,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) > o.MaxRedirects {
				if o.MaxRedirects == 0 {
					return http.ErrUseLastResponse
				}
				return fmt.Errorf("more than %d redirects", o.MaxRedirects)
			}
			if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
				return fmt.Errorf("redirect to a %s URL", r.URL.Scheme)
			}
			return nil
		}}
}
