// Package freeport picks TCP ports for servers that a test or a local
// deployment starts and must name before they listen (a postmaster, a
// broker, a child process given --grpc 127.0.0.1:N).
//
// Asking the kernel for port 0 and closing the listener gives a port that
// is free now, but from the kernel's ephemeral range: any outgoing
// connection anywhere on the machine may be given the same port before the
// server binds it, and on a busy machine (parallel test packages, each
// with its clients) that happens. Ports here come from below the ephemeral
// range, which the kernel never hands out on its own; only another picker
// like this one can collide, and it picks at random from some twenty
// thousand ports.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port considered: above the well-known and the
// commonly configured service ports.
const lowest = 10000

// rangeFile holds the kernel's ephemeral range, "low high".
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Port returns a port free on 127.0.0.1 right now.
func Port() (int, error) {
	addr, err := Addr("127.0.0.1")
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	return strconv.Atoi(p)
}

// Addr returns host:port with a port free on host (a loopback address)
// right now.
func Addr(host string) (string, error) {
	if high := ephemeralLow() - 1; high > lowest {
		for range 64 {
			addr := net.JoinHostPort(host, strconv.Itoa(lowest+rand.IntN(high-lowest+1)))
			if l, err := net.Listen("tcp", addr); err == nil {
				l.Close()
				return addr, nil
			}
		}
	}
	// No room below the ephemeral range (or no way to read it): the
	// kernel's choice, with its small race.
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("pick a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0 when
// it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0
	}
	low, err := parseLow(string(b))
	if err != nil {
		return 0
	}
	return low
}

func parseLow(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, errors.New("want two fields")
	}
	return strconv.Atoi(f[0])
}
