package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kcatPath is where the Debian/Ubuntu package installs kcat.
const kcatPath = "/usr/bin/kcat"

// kcatTimeout bounds one kcat run so that a client stuck on an unreachable
// broker fails the test instead of hanging it until the global timeout.
const kcatTimeout = 2 * time.Minute

// Kcat runs kcat with args plus "-b <addrs>" and returns its stdout. It
// fails the test, with kcat's stderr, when kcat exits non-zero or times out,
// and with an install hint when kcat is missing.
func (b *Broker) Kcat(t testing.TB, args ...string) []byte {
	t.Helper()
	bin := findKcat(t)
	ctx, cancel := context.WithTimeout(t.Context(), kcatTimeout)
	defer cancel()
	full := append(append([]string(nil), args...), "-b", strings.Join(b.Addrs(), ","))
	cmd := exec.CommandContext(ctx, bin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		t.Fatalf("kafkatest: kcat %s: %v\nstderr:\n%s", strings.Join(full, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// findKcat prefers /usr/bin/kcat and falls back to $PATH.
func findKcat(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(kcatPath); err == nil {
		return kcatPath
	}
	if p, err := exec.LookPath("kcat"); err == nil {
		return p
	}
	t.Fatalf("kafkatest: kcat not found at %s or in $PATH; install it with `apt-get install -y kcat`", kcatPath)
	return ""
}
