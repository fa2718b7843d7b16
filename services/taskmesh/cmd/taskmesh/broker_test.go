package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `taskmesh broker` serves the Kafka protocol on its port until stopped,
// and refuses to run without a data directory.
func TestBrokerCommand(t *testing.T) {
	cmd := rootCommand()
	cmd.SetArgs([]string{"broker"})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "--data-dir is required") {
		t.Fatalf("without --data-dir: %v", err)
	}
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd = rootCommand()
	cmd.SetArgs([]string{"broker", "--data-dir", t.TempDir(), "--port", strconv.Itoa(port)})
	cmd.SetOut(&bytes.Buffer{})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker does not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stopped: %v", err)
	}
}

// `taskmesh chaos` refuses a rate it cannot run and a Redis it cannot find
// before it starts anything.
func TestChaosCommandRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--redis-server", "/nonexistent/redis-server"},
		{"chaos", "--redis-server", "/bin/true", "--rate", "0"},
	} {
		cmd := rootCommand()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		if err := cmd.ExecuteContext(context.Background()); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
