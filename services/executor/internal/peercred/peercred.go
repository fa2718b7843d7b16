// Package peercred finds which user opened a TCP connection made on this
// machine: the owner of the client's socket, as /proc/net/tcp and
// /proc/net/tcp6 list it (the uid column is the socket's owner in the
// reader's user namespace). The agent-local API uses it to refuse
// sandboxed tasks, which run as their own unprivileged user and share the
// machine's loopback (docs/api/agent-local.md, "Who may call it").
package peercred

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNotFound: no socket of that pair is listed (the client closed it, or
// it is not on this machine).
var ErrNotFound = errors.New("peercred: no such connection")

// UID returns the owner of the socket at client whose peer is server: the
// user that connected to server from client. proc is the proc file
// system's root ("" for /proc).
func UID(proc string, client, server *net.TCPAddr) (uint32, error) {
	if proc == "" {
		proc = "/proc"
	}
	files := []string{"net/tcp6", "net/tcp"}
	if client.IP.To4() != nil {
		files = []string{"net/tcp", "net/tcp6"}
	}
	for _, name := range files {
		f, err := os.Open(filepath.Join(proc, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		uid, err := find(f, client, server)
		f.Close()
		if !errors.Is(err, ErrNotFound) {
			return uid, err
		}
	}
	return 0, ErrNotFound
}

// find reads one /proc/net/tcp-shaped table for the row whose local
// address is client and remote address server.
func find(r io.Reader, client, server *net.TCPAddr) (uint32, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), 4096)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid …
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		local, err1 := parseAddr(f[1])
		remote, err2 := parseAddr(f[2])
		if err1 != nil || err2 != nil || !same(local, client) || !same(remote, server) {
			continue
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("peercred: uid %q: %w", f[7], err)
		}
		return uint32(uid), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, ErrNotFound
}

// same compares two TCP addresses, an IPv4 one equal to its IPv4-mapped
// IPv6 form (a dual-stack socket lists its peers that way in tcp6).
func same(a, b *net.TCPAddr) bool { return a.Port == b.Port && a.IP.Equal(b.IP) }

// parseAddr reads "0100007F:1F90" (IPv4) or a 32-digit IPv6 address and a
// port, each in hex; the address's 32-bit words are in the kernel's byte
// order, little-endian on the machines Taskmesh runs on.
func parseAddr(s string) (*net.TCPAddr, error) {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("peercred: address %q", s)
	}
	raw, err := hex.DecodeString(host)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, fmt.Errorf("peercred: address %q", s)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return nil, fmt.Errorf("peercred: port %q", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(ip[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	return &net.TCPAddr{IP: ip, Port: int(p)}, nil
}
