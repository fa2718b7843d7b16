package kafka_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// A transaction open when the broker is SIGKILLed is aborted at the restart
// with its marker, before its producer may start again: what the producer
// commits afterwards is read exactly once, by franz-go and by librdkafka
// (kcat), and the open transaction's records never. Without the marker a
// read_committed fetch that covers the open transaction skips the
// producer's later transactions too (crash_repair.go).
func TestEmbeddedAbortsTransactionsACrashLeftOpen(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found (%v): install it with apt-get install -y kcat", err)
	}
	dir := t.TempDir()
	addr, kill := startCrashHelper(t, dir)
	cfg := kafka.Config{Brokers: []string{addr}}
	const topic = "relayed"
	ctx := testContext(t, 60*time.Second)
	if err := kafka.EnsureTopics(ctx, newClient(t, cfg), kafka.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	relay := newClient(t, cfg, kgo.TransactionalID("relay"), kgo.DefaultProduceTopic(topic))
	transaction := func(cl *kgo.Client, commit bool, vals ...string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
		if !commit {
			return
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	transaction(relay, true, "a1", "a2")
	transaction(relay, false, "open1", "open2") // in the log, never ended
	kill()

	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	var (
		mu     sync.Mutex
		logged []string
	)
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, Port: p, Logf: logf})
	if err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	aborted := 0
	for _, l := range logged {
		if strings.Contains(l, "aborted the transaction a crash left open") && strings.Contains(l, topic+"/0") {
			aborted++
		}
	}
	if aborted != 1 {
		t.Errorf("the restart logged %q, want one aborted transaction on %s/0", logged, topic)
	}

	again := newClient(t, e.Config(), kgo.TransactionalID("relay"), kgo.DefaultProduceTopic(topic))
	transaction(again, true, "b1")
	transaction(again, true, "b2", "tail")
	want := []string{"a1", "a2", "b1", "b2", "tail"}
	if got := values(readCommitted(t, e.Config(), topic, len(want))); !slices.Equal(got, want) {
		t.Errorf("franz-go read_committed %q, want %q", got, want)
	}
	out, err := exec.CommandContext(ctx, kcat, "-C", "-b", e.Addrs()[0], "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%s\n").Output()
	if err != nil {
		t.Fatalf("kcat: %v", err)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		t.Errorf("kcat read_committed %q, want %q", got, want)
	}

	// A clean stop needs no repair: the next start scans nothing.
	e.Close()
	logged = nil
	e, err = kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, Port: p, Logf: logf})
	if err != nil {
		t.Fatalf("restart after Close: %v", err)
	}
	defer e.Close()
	if len(logged) != 0 {
		t.Errorf("a restart after a clean stop logged %q", logged)
	}
	if got := values(readCommitted(t, e.Config(), topic, len(want))); !slices.Equal(got, want) {
		t.Errorf("after a clean restart franz-go read_committed %q, want %q", got, want)
	}
}

// startCrashHelper runs a persistent broker over dir in a child process
// (TestMain's crash helper) and returns its address and a kill that
// SIGKILLs it.
func startCrashHelper(t *testing.T, dir string) (addr string, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		t.Fatalf("helper broker did not start: %q, %v", line, err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "ADDR ")), func() {
		t.Helper()
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
}

// A producer whose transaction a crash interrupted cannot finish it after
// the restart. The broker has lost the transaction: answering the
// producer's commit with success would commit nothing of what was written
// before the crash (the restart aborts it) while the producer goes on as
// if all of it were in, and an outbox relay would never publish those
// events again. Every transactional call of a transactional id not
// initialised again since the restart — the commit, or first a produce
// that would add a partition — is answered PRODUCER_FENCED; a new
// producer for the same id initialises it and works.
func TestEmbeddedFencesProducersACrashInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name string
		// goOn is what the interrupted producer does after the restart;
		// it returns the error of the call that must be fenced.
		goOn func(ctx context.Context, old *kgo.Client, produce func(*kgo.Client, int32, string) error) error
	}{
		{"commit", func(ctx context.Context, old *kgo.Client, _ func(*kgo.Client, int32, string) error) error {
			return old.EndTransaction(ctx, kgo.TryCommit)
		}},
		{"produce, then commit", func(ctx context.Context, old *kgo.Client, produce func(*kgo.Client, int32, string) error) error {
			err := produce(old, 2, "after-crash")
			if end := old.EndTransaction(ctx, kgo.TryCommit); end == nil {
				return errors.New("the commit after the produce was answered with success")
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addr, kill := startCrashHelper(t, dir)
			cfg := kafka.Config{Brokers: []string{addr}}
			const topic = "interrupted"
			ctx := testContext(t, 60*time.Second)
			if err := kafka.EnsureTopics(ctx, newClient(t, cfg), kafka.TopicSpec{Name: topic, Partitions: 3}); err != nil {
				t.Fatal(err)
			}
			produce := func(cl *kgo.Client, partition int32, v string) error {
				return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}).FirstErr()
			}
			opts := []kgo.Opt{kgo.TransactionalID("relay"), kgo.RecordPartitioner(kgo.ManualPartitioner())}
			old := newClient(t, cfg, opts...)
			// One committed transaction first, then one the crash
			// interrupts.
			if err := old.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := produce(old, 0, "committed"); err != nil {
				t.Fatal(err)
			}
			if err := old.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			if err := old.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for p := range int32(2) {
				if err := produce(old, p, fmt.Sprintf("before-crash-%d", p)); err != nil {
					t.Fatal(err)
				}
			}
			kill()

			_, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, Port: p})
			if err != nil {
				t.Fatalf("restart after SIGKILL: %v", err)
			}
			defer e.Close()

			if err := tc.goOn(ctx, old, produce); !errors.Is(err, kerr.ProducerFenced) {
				t.Fatalf("the interrupted producer after the restart: %v, want PRODUCER_FENCED", err)
			}

			// A new producer for the id starts clean and commits.
			again := newClient(t, e.Config(), opts...)
			if err := again.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := produce(again, 1, "new"); err != nil {
				t.Fatal(err)
			}
			if err := again.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("new producer's commit: %v", err)
			}
			got := values(readCommitted(t, e.Config(), topic, 2))
			slices.Sort(got)
			if !slices.Equal(got, []string{"committed", "new"}) {
				t.Errorf("read_committed %q, want the committed and the new producer's records only", got)
			}
		})
	}
}
