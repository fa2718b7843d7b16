// Package weburl holds the one rule for the http(s) URLs a tenant gives
// Taskmesh to call back — a task's or a group's webhook.url, a tenant's
// default webhook endpoint — checked when the URL is submitted. Whether
// the address behind it may be called is decided later, when it is
// called, on the address actually dialed (package platform/safehttp):
// a name can resolve differently by then.
//
// It is pure, and sits under platform/domain so that the scheduler's and
// the consumers' domain packages check URLs by the one rule.
package weburl

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// Problem returns why raw is not an absolute http or https URL of at most
// max bytes with a host and no credentials, as a phrase to follow the
// field's name ("is not a valid URL"), or "" when it is one.
//
// A host whose last label is a number is an IPv4 address to browsers and
// to the C library's resolver (inet_aton), which also read "167772161",
// "0x7f.1" and "012.0.0.1" as addresses; to Go's resolver it is a name.
// Such a host is accepted only as a plain dotted-quad address, so that
// what the URL names is what gets judged and dialed, not a name no
// resolver finds (its deliveries would retry for a day).
func Problem(raw string, max int) string {
	if len(raw) > max {
		return fmt.Sprintf("is longer than %d characters", max)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || strings.ContainsAny(raw, "\x00\r\n\t "):
		return "is not a valid URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http or https URL"
	case u.Host == "" || u.Hostname() == "":
		return "has no host"
	case u.User != nil:
		return "must not carry credentials"
	case numericHost(u.Hostname()) && !dottedQuad(u.Hostname()):
		return fmt.Sprintf("has the numeric host %q: write an IPv4 address as four decimal numbers, such as 203.0.113.7", u.Hostname())
	}
	return ""
}

// numericHost reports whether host's last label (a trailing dot aside) is
// a decimal or 0x-hexadecimal number: the hosts the URL standard and
// inet_aton parse as IPv4 addresses. IPv6 literals have colons and are
// not numeric hosts.
func numericHost(host string) bool {
	if strings.Contains(host, ":") {
		return false
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// dottedQuad reports whether host is an IPv4 address in the one form
// every parser reads alike: four decimal numbers without leading zeros.
func dottedQuad(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.Is4()
}
