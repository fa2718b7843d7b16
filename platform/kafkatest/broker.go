package kafkatest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// Broker is an embedded broker owned by one test, with a data dir under
// t.TempDir() so it can be stopped and started again on the same port with
// its data. It is closed in t.Cleanup.
type Broker struct {
	t          testing.TB
	dir        string
	port       int
	partitions int32
	addrs      []string

	mu  sync.Mutex
	emb *kafka.Embedded // nil while stopped

	// done silences the broker's log once the test has finished:
	// testing panics on a Log call after the test completed.
	done atomic.Bool
}

// Option configures New.
type Option func(*Broker)

// WithPartitions sets the partition count of auto-created topics (kfake's
// default is 10).
func WithPartitions(n int32) Option {
	return func(b *Broker) { b.partitions = n }
}

// New starts a broker for t and stops it in t.Cleanup.
func New(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	b := &Broker{t: t, dir: t.TempDir()}
	for _, o := range opts {
		o(b)
	}
	t.Cleanup(func() {
		b.Stop()
		b.done.Store(true)
	})
	b.Start()
	return b
}

// Addrs returns ["127.0.0.1:port"]; the port stays the same across
// Stop/Start.
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// Config returns a kafka.Config pointing at the broker.
func (b *Broker) Config() kafka.Config { return kafka.Config{Brokers: b.Addrs()} }

// Stop closes the broker: new connections are refused and open ones are
// dropped until Start. Its data is flushed to the data dir. Stopping a
// stopped broker does nothing.
func (b *Broker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.emb != nil {
		b.emb.Close()
		b.emb = nil
	}
}

// Start starts the broker again on the same port with the same data. It must
// be called from the test goroutine, as it fails the test on error. Starting
// a running broker does nothing.
func (b *Broker) Start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.emb != nil {
		return
	}
	emb, err := kafka.StartEmbedded(kafka.EmbeddedOptions{
		DataDir:    b.dir,
		Port:       b.port, // 0 on the first start: any free port
		Partitions: b.partitions,
		Logf:       b.logf,
	})
	if err != nil {
		b.t.Fatalf("kafkatest: start broker: %v", err)
	}
	b.emb = emb
	if b.port == 0 {
		b.port = emb.Port()
		b.addrs = emb.Addrs()
	}
}

func (b *Broker) logf(format string, args ...any) {
	if !b.done.Load() {
		b.t.Logf(format, args...)
	}
}

// Remote returns a Broker for a broker started elsewhere (a stack's
// embedded broker, a real cluster): only Kcat and ConsumeAll work on it.
func Remote(addrs []string) *Broker { return &Broker{addrs: append([]string(nil), addrs...)} }
