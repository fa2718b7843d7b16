package safehttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestPublicAndPolicy(t *testing.T) {
	allow, err := ParseAllow([]string{"10.20.0.0/16", "192.168.1.7", ""})
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Allow: allow}
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "::ffff:8.8.8.8": true,
		"127.0.0.1": false, "::1": false, "10.0.0.5": false, "172.16.3.4": false, "192.168.1.8": false,
		"169.254.169.254": false, "fe80::1": false, "100.64.1.1": false, "0.0.0.0": false, "224.0.0.1": false, "fc00::1": false, "fd00::1": false,
		"::ffff:127.0.0.1": false, "2001:4860:4860::8888": true,
		"10.20.3.4": true, "192.168.1.7": true, "::ffff:10.20.0.1": true,
		// Special-purpose IPv4 that netip calls global unicast.
		"0.1.2.3": false, "192.0.0.8": false, "198.18.0.1": false, "240.0.0.1": false,
		// IPv6 carrying IPv4: judged by the IPv4 address a gateway reaches.
		"64:ff9b::a9fe:a9fe": false, "64:ff9b::a00:1": false, "64:ff9b::808:808": true,
		"2002:a00:1::": false, "2002:a9fe:a9fe::1": false, "2002:808:808::1": true,
		// Refused whatever they carry.
		"64:ff9b:1::808:808": false, "2001:0:4136:e378:8000:63bf:3fff:fdd2": false, "::a00:1": false, "::808:808": false,
	} {
		if got := p.Permits(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Permits(%s) = %v, want %v", addr, got, want)
		}
	}
	if !(Policy{AllowAll: true}).Permits(netip.MustParseAddr("127.0.0.1")) {
		t.Error("AllowAll refused loopback")
	}
	if _, err := ParseAllow([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad network parsed")
	}
}

// The check runs on the address actually dialed: a name that resolves to
// loopback is refused, and so is a redirect to it.
func TestClientRefusesWhatThePolicyDoesNot(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, target := range []string{srv.URL, "http://localhost:" + port + "/"} {
		_, err := NewClient(Options{}).Get(target)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("GET %s: %v, want ErrRefused", target, err)
		}
	}
	allowed := NewClient(Options{Policy: Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	resp, err := allowed.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	redirect := httptest.NewServer(http.RedirectHandler(srv.URL, http.StatusFound))
	defer redirect.Close()
	resp, err = NewClient(Options{Policy: Policy{AllowAll: true}}).Get(redirect.URL)
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("no redirects followed: %v %v", resp, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, redirect.URL, nil)
	resp, err = NewClient(Options{Policy: Policy{AllowAll: true}, MaxRedirects: 2}).Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("redirect followed: %v %v", resp, err)
	}
	resp.Body.Close()
}
