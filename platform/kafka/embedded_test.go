package kafka_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// crashHelperEnv makes the test binary act as a broker process that the
// SIGKILL test can kill (see TestMain).
const crashHelperEnv = "TASKMESH_KAFKA_CRASH_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		runCrashHelper(dir)
		return
	}
	os.Exit(m.Run())
}

// runCrashHelper starts a persistent broker, prints its address and waits to
// be killed.
func runCrashHelper(dir string) {
	e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, Partitions: 1})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", e.Addrs()[0])
	select {}
}

// seed writes the state every persistence test checks afterwards to a
// single-partition topic: plain records, a committed and an aborted
// transaction, a final "tail" record, and a consumer group that committed
// after the first two records. It returns the values a read_committed
// reader must see, in order.
func seed(t *testing.T, cfg kafka.Config, topic, group string) []string {
	t.Helper()
	ctx := testContext(t, 60*time.Second)
	admin := newClient(t, cfg)
	if err := kafka.EnsureTopics(ctx, admin, kafka.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	produce := func(cl *kgo.Client, vals ...string) {
		t.Helper()
		for _, v := range vals {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
	}
	plain := newClient(t, cfg)
	produce(plain, "p1", "p2")

	tx := newClient(t, cfg, kgo.TransactionalID("seed-"+topic))
	for _, commit := range []bool{true, false} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if commit {
			produce(tx, "tx-committed-1", "tx-committed-2")
		} else {
			produce(tx, "tx-aborted")
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction (commit=%v): %v", commit, err)
		}
	}
	produce(plain, "tail")

	// A real group member commits what it consumed: offsets 0 and 1.
	consumer := newClient(t, cfg, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []*kgo.Record
	for len(got) < 2 {
		fs := consumer.PollRecords(ctx, 2-len(got))
		if ctx.Err() != nil {
			t.Fatalf("group consume: %v", ctx.Err())
		}
		got = append(got, fs.Records()...)
	}
	if err := consumer.CommitRecords(ctx, got...); err != nil {
		t.Fatalf("commit: %v", err)
	}
	consumer.Close()
	return []string{"p1", "p2", "tx-committed-1", "tx-committed-2", "tail"}
}

// verify checks what seed wrote after a restart: every committed record,
// none of the aborted transaction, and the group's committed offset (2, the
// next record to read).
func verify(t *testing.T, cfg kafka.Config, topic, group string, want []string) {
	t.Helper()
	if got := values(readCommitted(t, cfg, topic, len(want))); !slices.Equal(got, want) {
		t.Fatalf("after restart read %q, want %q", got, want)
	}
	ctx := testContext(t, 30*time.Second)
	offsets, err := kadm.NewClient(newClient(t, cfg)).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets: %v", err)
	}
	o, ok := offsets.Lookup(topic, 0)
	if !ok || o.Err != nil || o.At != 2 {
		t.Fatalf("committed offset of %s after restart = %+v (found %v), want 2", group, o, ok)
	}
}

func TestEmbeddedPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, SyncWrites: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	addrs := e.Addrs()
	want := seed(t, e.Config(), "orders", "billing")
	e.Close()
	e.Close() // idempotent

	if _, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		t.Fatal("broker still accepts connections after Close")
	}

	e, err = kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, Port: e.Port(), SyncWrites: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("restart on the same port: %v", err)
	}
	t.Cleanup(e.Close)
	if !slices.Equal(e.Addrs(), addrs) {
		t.Fatalf("restarted broker at %v, want %v", e.Addrs(), addrs)
	}
	verify(t, e.Config(), "orders", "billing", want)
}

// A SIGKILLed broker (no Close, nothing flushed by us) keeps what it had
// acknowledged: kfake appends each batch and group commit to its files as it
// happens, and the kernel drops the data dir lock with the process.
func TestEmbeddedSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	addr, kill := startCrashHelper(t, dir)
	want := seed(t, kafka.Config{Brokers: []string{addr}}, "orders", "billing")

	kill()

	_, portStr, _ := net.SplitHostPort(addr)
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatalf("helper address %q: %v", addr, err)
	}
	e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir, Port: port, Logf: t.Logf})
	if err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	t.Cleanup(e.Close)
	verify(t, e.Config(), "orders", "billing", want)
}

func TestEmbeddedDataDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if e2, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir}); err == nil {
		e2.Close()
		t.Fatal("second broker on the same data dir started")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second broker error = %v, want 'in use'", err)
	}
	e.Close()
	e, err = kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir})
	if err != nil {
		t.Fatalf("start after the first broker closed: %v", err)
	}
	e.Close()
}

// The data directory holds every event (task specs and their env among
// them): it is made, or made again, its owner's alone.
func TestEmbeddedDataDirIsPrivate(t *testing.T) {
	for _, existing := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "kafka")
		if existing {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("data dir (existing %v): %v, %v; want 0700", existing, fi.Mode(), err)
		}
	}
}

func TestEmbeddedInMemoryAutoCreatesTopics(t *testing.T) {
	e, err := kafka.StartEmbedded(kafka.EmbeddedOptions{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if a := e.Addrs(); len(a) != 1 || !strings.HasPrefix(a[0], "127.0.0.1:") {
		t.Fatalf("Addrs() = %v, want one 127.0.0.1 address", a)
	}
	cl := newClient(t, e.Config(), kgo.AllowAutoTopicCreation())
	ctx := testContext(t, 30*time.Second)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if n, err := kafka.Partitions(ctx, cl, "auto"); err != nil || n != 4 {
		t.Fatalf("Partitions(auto) = %d, %v; want 4", n, err)
	}
}

func TestEmbeddedRejectsBadOptions(t *testing.T) {
	for _, opts := range []kafka.EmbeddedOptions{{Port: -1}, {Port: 70000}, {Partitions: -2}} {
		if e, err := kafka.StartEmbedded(opts); err == nil {
			e.Close()
			t.Fatalf("StartEmbedded(%+v) succeeded", opts)
		}
	}
	// A port held by someone else fails after the bind retry rather than
	// hanging.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	_, err = kafka.StartEmbedded(kafka.EmbeddedOptions{Port: ln.Addr().(*net.TCPAddr).Port})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start on a taken port: err = %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("start on a taken port took %v", d)
	}
}
