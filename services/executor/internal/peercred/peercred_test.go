package peercred

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// A table as the kernel writes it: the header, a listener and both ends
// of a loopback connection, and an IPv6 one.
const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1B9F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D431 0100007F:1B9F 01 00000000:00000000 00:00000000 00000000 65534        0 1002 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1B9F 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
`

func TestFindReadsTheClientsRow(t *testing.T) {
	server := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0x1B9F}
	client := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0xD431}
	uid, err := find(strings.NewReader(table), client, server)
	if err != nil || uid != 65534 {
		t.Fatalf("the client's socket = %d, %v; want 65534", uid, err)
	}
	// The server's end of the same connection is root's.
	if uid, err := find(strings.NewReader(table), server, client); err != nil || uid != 0 {
		t.Fatalf("the server's socket = %d, %v; want 0", uid, err)
	}
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	if _, err := find(strings.NewReader(table), other, server); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown pair: %v, want ErrNotFound", err)
	}
	// A row that cannot be read is skipped, not taken.
	bad := "header\n   0: zz:1 0100007F:1B9F 01 0 0 0 65534 0 1\n"
	if _, err := find(strings.NewReader(bad), client, server); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a malformed row: %v, want ErrNotFound", err)
	}
}

func TestParseAddrIPv6(t *testing.T) {
	// ::1 as /proc/net/tcp6 writes it, and an IPv4-mapped 127.0.0.1.
	for s, want := range map[string]string{
		"00000000000000000000000001000000:1F90": "[::1]:8080",
		"0000000000000000FFFF00000100007F:1F90": "127.0.0.1:8080",
	} {
		a, err := parseAddr(s)
		if err != nil || a.String() != want {
			t.Errorf("parseAddr(%s) = %v, %v; want %s", s, a, err, want)
		}
	}
}

// A real connection on this machine: the client's socket is found with
// its owner, this process's user, and, when the test runs as root, a
// client started as another user is reported as that user.
func TestUIDOfARealConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	defer s.Close()
	uid, err := UID("", s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr))
	if err != nil || uid != uint32(os.Getuid()) {
		t.Fatalf("UID = %d, %v; want this process's %d", uid, err, os.Getuid())
	}

	if os.Getuid() != 0 {
		return // a socket of another user needs root
	}
	// A socket belongs to the file-system user of the thread that made
	// it: one made as uid 65534 is reported as 65534's.
	c2 := dialAs(t, 65534, ln.Addr().String())
	defer c2.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	s2 := <-accepted
	defer s2.Close()
	uid, err = UID("", s2.RemoteAddr().(*net.TCPAddr), s2.LocalAddr().(*net.TCPAddr))
	if err != nil || uid != 65534 {
		t.Fatalf("UID of a client socket made as 65534 = %d, %v", uid, err)
	}
}

// dialAs connects to addr from a socket made while this thread's
// file-system user is uid.
func dialAs(t *testing.T, uid int, addr string) net.Conn {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0); e != 0 {
		t.Fatalf("setfsuid: %v", e)
	}
	defer syscall.RawSyscall(syscall.SYS_SETFSUID, 0, 0, 0)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "client")
	defer f.Close()
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: tcp.Port, Addr: [4]byte(tcp.IP.To4())}); err != nil {
		t.Fatal(err)
	}
	c, err := net.FileConn(f) // a duplicate of fd, which f's Close leaves open
	if err != nil {
		t.Fatal(err)
	}
	return c
}
