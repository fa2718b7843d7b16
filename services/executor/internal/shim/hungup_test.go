package shim

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeShim accepts Attach's two connections on a socket and serves the
// control one with serve.
func fakeShim(t *testing.T, serve func(ctl net.Conn)) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "shim.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		ctl, err := ln.Accept()
		if err != nil {
			return
		}
		wait, err := ln.Accept()
		if err != nil {
			ctl.Close()
			return
		}
		defer wait.Close()
		serve(ctl)
	}()
	return socket
}

// A shim that closes the connection (its task ended and it left) is a
// hang-up; one that answers with an error, or does not answer in time,
// is not.
func TestHungUp(t *testing.T) {
	ctx := context.Background()
	closing := fakeShim(t, func(ctl net.Conn) {
		_, _ = bufio.NewReader(ctl).ReadBytes('\n')
		ctl.Close()
	})
	sess, err := Attach(closing)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sess.Fence(ctx, time.Second)
	if err == nil || !HungUp(err) {
		t.Fatalf("fence to a shim that hung up: %v, HungUp = false", err)
	}
	sess.Close()

	refusing := fakeShim(t, func(ctl net.Conn) {
		defer ctl.Close()
		if _, err := bufio.NewReader(ctl).ReadBytes('\n'); err == nil {
			_, _ = ctl.Write([]byte(`{"error":"fence: the task is stopping","state":{}}` + "\n"))
		}
		_, _ = bufio.NewReader(ctl).ReadBytes('\n') // until the client leaves
	})
	sess, err = Attach(refusing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = sess.Fence(ctx, time.Second); err == nil || HungUp(err) {
		t.Fatalf("fence refused by the shim: %v, HungUp = true", err)
	}
	sess.Close()

	silent := fakeShim(t, func(ctl net.Conn) {
		defer ctl.Close()
		_, _ = bufio.NewReader(ctl).ReadBytes('\n')
		_, _ = bufio.NewReader(ctl).ReadBytes('\n') // never answers
	})
	sess, err = Attach(silent)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err = sess.Fence(short, time.Second); err == nil || HungUp(err) {
		t.Fatalf("fence unanswered: %v, HungUp = true", err)
	}
	sess.Close()
}
