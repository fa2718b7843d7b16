package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// EmbeddedOptions configures StartEmbedded.
type EmbeddedOptions struct {
	// DataDir is where records, topics, producer state and committed
	// offsets persist across restarts; "" keeps everything in memory.
	// Segments are written per batch, so data survives the process being
	// killed (SIGKILL); only an OS crash can lose unsynced batches, which
	// SyncWrites prevents. Transactions a crash left open are aborted,
	// with their markers, before transactional producers may start again
	// (crash_repair.go). A directory is used by one broker at a time: a
	// second StartEmbedded on it fails instead of corrupting it.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one. A fixed port
	// that is briefly still in use (a previous broker closing) is retried
	// for a few seconds before StartEmbedded gives up.
	Port int
	// SyncWrites fsyncs each batch (durable dev mode, slower).
	SyncWrites bool
	// Partitions is the partition count of auto-created topics and of
	// CreateTopics requests that ask for the broker default; 0 keeps
	// kfake's default (10).
	Partitions int32
	// Logf receives the broker's warnings and errors (for example a
	// failed segment write, after which the broker keeps serving from
	// memory and that batch is not persisted); nil = silent.
	Logf func(format string, args ...any)
}

// bindRetry is how long a fixed port is retried while still in use.
const bindRetry = 5 * time.Second

// Embedded is an in-process, single-node Kafka-protocol broker (franz-go's
// kfake) for `taskmesh dev` and tests. It speaks the real protocol on
// 127.0.0.1, so any Kafka client (franz-go, librdkafka/kcat) can use it;
// topics are auto-created on first use.
//
// Check kfake's skipped_features before relying on exotic broker behaviour:
// quotas are not enforced, there is no replication, and share groups and
// tiered storage are missing.
type Embedded struct {
	cluster *kfake.Cluster
	addrs   []string
	lock    *os.File // flock on DataDir, nil in memory
	dataDir string
	// crashed: the data dir was not closed cleanly before this start.
	crashed bool
	logf    func(format string, args ...any)

	closeOnce sync.Once
}

// StartEmbedded starts a broker and returns once it accepts connections.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("kafka: embedded broker port %d out of range", opts.Port)
	}
	if opts.Partitions < 0 {
		return nil, fmt.Errorf("kafka: embedded broker default partitions %d is negative", opts.Partitions)
	}
	e := &Embedded{logf: opts.Logf}
	// After a crash, connections wait until the transactional gate is in
	// place (crash_repair.go); otherwise they are let through at once.
	gate := &gatedListener{ready: make(chan struct{})}
	listen := listenRetrying(opts.Port != 0)
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := listen(network, addr)
			if err != nil {
				return nil, err
			}
			gate.Listener = ln
			return gate, nil
		}),
	}
	if opts.Port != 0 {
		kopts = append(kopts, kfake.Ports(opts.Port))
	}
	if opts.Partitions > 0 {
		kopts = append(kopts, kfake.DefaultNumPartitions(int(opts.Partitions)))
	}
	if opts.Logf != nil {
		kopts = append(kopts, kfake.WithLogger(logger(opts.Logf)))
	}
	if opts.DataDir != "" {
		// The log holds every event, task specs and their env among them:
		// the data directory is its owner's alone, whatever modes the
		// broker gives the files in it (docs/security.md).
		if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("kafka: embedded broker data dir: %w", err)
		}
		if err := os.Chmod(opts.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("kafka: embedded broker data dir: %w", err)
		}
		lock, err := lockDir(opts.DataDir)
		if err != nil {
			return nil, err
		}
		e.lock, e.dataDir = lock, opts.DataDir
		if e.crashed, err = openAfterCrash(opts.DataDir); err != nil {
			e.unlock()
			return nil, err
		}
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
		if opts.SyncWrites {
			kopts = append(kopts, kfake.SyncWrites())
		}
	}
	cluster, err := kfake.NewCluster(kopts...)
	if err != nil {
		e.unlock()
		return nil, fmt.Errorf("kafka: start embedded broker: %w", err)
	}
	e.cluster = cluster
	e.addrs = cluster.ListenAddrs()
	if !e.crashed {
		gate.open()
		return e, nil
	}
	txns := gateTransactions(cluster)
	gate.open()
	ctx, cancel := context.WithTimeout(context.Background(), repairTimeout)
	defer cancel()
	aborted, err := abortOpenTransactions(ctx, e.addrs)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("kafka: embedded broker: abort the transactions a crash left open: %w", err)
	}
	txns.lift()
	if opts.Logf != nil {
		for _, o := range aborted {
			opts.Logf("aborted the transaction a crash left open: producer %d on %s/%d from offset %d",
				o.producerID, o.topic, o.partition, o.first)
		}
	}
	return e, nil
}

// Addrs returns the broker address, ["127.0.0.1:port"].
func (e *Embedded) Addrs() []string { return append([]string(nil), e.addrs...) }

// Port returns the TCP port the broker listens on, so a restart can reuse it.
func (e *Embedded) Port() int {
	_, p, _ := net.SplitHostPort(e.addrs[0])
	n, _ := strconv.Atoi(p)
	return n
}

// Config returns a plaintext Config pointing at the broker.
func (e *Embedded) Config() Config { return Config{Brokers: e.Addrs()} }

// Close stops the broker: the listener is closed (new connections are
// refused), open connections are dropped and, with a DataDir, the state is
// flushed there before Close returns. Close is idempotent.
func (e *Embedded) Close() {
	e.closeOnce.Do(func() {
		e.cluster.Close()
		if e.dataDir != "" {
			// kfake saved its transactions' state on Close: the next start
			// needs no repair (crash_repair.go).
			// Without the mark the next start scans the logs for
			// nothing: slower, never wrong.
			if err := markCleanStop(e.dataDir); err != nil && e.logf != nil {
				e.logf("clean-stop mark not written (the next start will scan the logs): %v", err)
			}
		}
		e.unlock()
	})
}

func (e *Embedded) unlock() {
	if e.lock != nil {
		unlockDir(e.lock)
		e.lock = nil
	}
}

// listenRetrying binds like net.Listen (which sets SO_REUSEADDR on Unix, so
// TIME_WAIT connections of a previous broker do not block the port). When
// the port is fixed it also retries EADDRINUSE for a while: a previous
// broker on the same port, in this or another process, may still be closing.
func listenRetrying(fixed bool) func(network, addr string) (net.Listener, error) {
	return func(network, addr string) (net.Listener, error) {
		deadline := time.Now().Add(bindRetry)
		for {
			ln, err := net.Listen(network, addr)
			if err == nil || !fixed || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
				return ln, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// logger adapts Logf to kfake, keeping warnings and errors only: kfake logs
// every request at info level.
type logger func(format string, args ...any)

func (l logger) Logf(level kfake.LogLevel, format string, args ...any) {
	if level == kfake.LogLevelNone || level > kfake.LogLevelWarn {
		return
	}
	l("kfake "+level.String()+": "+format, args...)
}
