package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortIsBelowTheEphemeralRangeAndBindable(t *testing.T) {
	low := ephemeralLow()
	if low == 0 {
		t.Fatalf("%s unreadable on this machine", rangeFile)
	}
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < lowest || p >= low {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
}

func TestAddrSkipsAPortInUse(t *testing.T) {
	// A port someone listens on is never returned while it is held.
	held, err := Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", held)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 200 {
		a, err := Addr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if a == held {
			t.Fatalf("Addr returned %s, which is in use", a)
		}
	}
}

func TestParseLow(t *testing.T) {
	if low, err := parseLow("32768\t60999\n"); err != nil || low != 32768 {
		t.Fatalf("parseLow = %d, %v", low, err)
	}
	for _, bad := range []string{"", "x 1", "1"} {
		if _, err := parseLow(bad); err == nil {
			t.Errorf("parseLow(%q) accepted", bad)
		}
	}
}
