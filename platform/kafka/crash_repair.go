package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Transactions a crash left open (docs/decisions/0005-embedded-kafka-broker.md).
//
// kfake persists every batch as it is written, but the state of open
// transactions only when it is closed. After a crash (SIGKILL, power loss)
// it replays its segments, finds the transactional batches no commit or
// abort marker ended, and treats them as aborted in memory — without
// writing an abort marker. A read_committed reader is then told, for any
// fetch that covers those batches, that the producer's transaction from
// that offset on is aborted, and skips that producer's transactional
// batches until it meets an abort marker that never comes: records the
// same producer commits after the restart (an outbox relay keeps its
// transactional id) are skipped by some fetches and not by others, and a
// relay that republishes the aborted events shows them twice to a reader
// that does not skip them. Either way the stream stops being exactly once.
//
// So a broker restarted over a data directory that was not closed cleanly
// writes the missing abort markers itself before any transactional
// producer can start again: a clean Close leaves cleanStopFile behind, a
// start removes it, and a start that does not find it (over a directory
// holding data) scans every partition's batches for transactions without
// an end and aborts them with WriteTxnMarkers, the request a transaction
// coordinator uses. Until that is done, InitProducerID for a transactional
// id is answered CONCURRENT_TRANSACTIONS, as a real coordinator answers
// while it completes a previous transaction, and clients retry; and the
// producers the crash interrupted are fenced (transactionGate).

// cleanStopFile is written by Close once the broker stopped cleanly.
const cleanStopFile = "taskmesh-clean-stop"

// openAfterCrash reports whether dir holds a broker's data that was not
// closed cleanly, and clears the clean-stop mark so that a crash from now
// on is noticed at the next start.
func openAfterCrash(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("kafka: embedded broker data dir: %w", err)
	}
	data, clean := false, false
	for _, e := range entries {
		switch e.Name() {
		case cleanStopFile:
			clean = true
		case lockFile:
		default:
			data = true
		}
	}
	if clean {
		if err := os.Remove(filepath.Join(dir, cleanStopFile)); err != nil {
			return false, fmt.Errorf("kafka: embedded broker clean-stop mark: %w", err)
		}
	}
	return data && !clean, nil
}

// markCleanStop records that the broker over dir stopped cleanly.
func markCleanStop(dir string) error {
	return os.WriteFile(filepath.Join(dir, cleanStopFile), nil, 0o644)
}

// gatedListener holds back accepted connections until open is called, so
// the transactional gate is in place before any client can reach the
// broker.
type gatedListener struct {
	net.Listener
	ready chan struct{}
	once  sync.Once
}

func (l *gatedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	<-l.ready
	return conn, nil
}

func (l *gatedListener) open() { l.once.Do(func() { close(l.ready) }) }

// transactionGate guards transactions after a crash. Until lift is called
// it answers InitProducerID for a transactional id with
// CONCURRENT_TRANSACTIONS, as a real coordinator does while it completes
// a previous transaction, and clients retry.
//
// It also fences the producers the crash interrupted, for the broker's
// whole life. kfake restores a producer's id and epoch after a crash but
// not its open transaction, and answers the producer's next calls as if
// it stood between transactions (a produce of v12+ even starts a new
// transaction by itself, KIP-890): a commit of the transaction the crash
// interrupted can be answered with success while the batches written
// before the crash are aborted by the repair, and an outbox relay then
// never publishes those events again. A real coordinator keeps the
// transaction and completes it. So every transactional call — Produce
// naming a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
// TxnOffsetCommit — of a transactional id that has not been given a
// producer id by InitProducerID since this start is answered
// PRODUCER_FENCED: the client gives the producer up, and a new one
// (InitProducerID) starts from what is really in the log.
type transactionGate struct {
	cluster *kfake.Cluster
	lifted  atomic.Bool

	mu          sync.Mutex
	initialized map[string]bool // transactional ids given a producer id since this start
}

// fencedKeys are the calls a producer makes inside a transaction (Produce
// only when it names a transactional id).
var fencedKeys = []kmsg.Key{kmsg.Produce, kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.EndTxn, kmsg.TxnOffsetCommit}

func gateTransactions(c *kfake.Cluster) *transactionGate {
	g := &transactionGate{cluster: c, initialized: map[string]bool{}}
	c.ControlKey(int16(kmsg.InitProducerID), g.initProducerID)
	for _, k := range fencedKeys {
		c.ControlKey(int16(k), g.fence)
	}
	return g
}

func (g *transactionGate) lift() { g.lifted.Store(true) }

func (g *transactionGate) initProducerID(req kmsg.Request) (kmsg.Response, error, bool) {
	g.cluster.KeepControl() // for the broker's life: every init is noted
	init, ok := req.(*kmsg.InitProducerIDRequest)
	if !ok || init.TransactionalID == nil {
		return nil, nil, false // idempotent producers hold no transaction
	}
	if !g.lifted.Load() {
		resp := init.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		return resp, nil, true
	}
	g.mu.Lock()
	g.initialized[*init.TransactionalID] = true
	g.mu.Unlock()
	return nil, nil, false
}

func (g *transactionGate) fence(req kmsg.Request) (kmsg.Response, error, bool) {
	g.cluster.KeepControl()
	resp, txid, ok := fencedResponse(req)
	if !ok {
		return nil, nil, false
	}
	g.mu.Lock()
	known := g.initialized[txid]
	g.mu.Unlock()
	if known {
		return nil, nil, false
	}
	return resp, nil, true
}

// fencedResponse is req's answer with PRODUCER_FENCED everywhere, and the
// transactional id req is for; ok is false for a request it does not know
// (or a broker-to-broker AddPartitionsToTxn, which names no single id).
func fencedResponse(req kmsg.Request) (resp kmsg.Response, txid string, ok bool) {
	code := kerr.ProducerFenced.Code
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		if r.TransactionID == nil {
			return nil, "", false
		}
		out := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rp.BaseOffset, rp.LogStartOffset = -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		return out, *r.TransactionID, true
	case *kmsg.AddPartitionsToTxnRequest:
		if r.Version >= 4 {
			return nil, "", false
		}
		out := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		return out, r.TransactionalID, true
	case *kmsg.AddOffsetsToTxnRequest:
		out := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		out.ErrorCode = code
		return out, r.TransactionalID, true
	case *kmsg.EndTxnRequest:
		out := r.ResponseKind().(*kmsg.EndTxnResponse)
		out.ErrorCode = code
		return out, r.TransactionalID, true
	case *kmsg.TxnOffsetCommitRequest:
		out := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		return out, r.TransactionalID, true
	}
	return nil, "", false
}

// openTransaction is a producer's transaction that a partition's log
// leaves without an end.
type openTransaction struct {
	producerID int64
	epoch      int16
	topic      string
	partition  int32
	first      int64 // offset of its first batch
}

// abortOpenTransactions finds the transactions the logs of the broker at
// addrs leave without an end and writes an abort marker for each: steps 2
// and 3 of the restart after a crash described above. It returns what it
// aborted.
func abortOpenTransactions(ctx context.Context, addrs []string) ([]openTransaction, error) {
	// Each request may take as long as the whole repair may (ctx bounds
	// it): the scan reads every partition's log from its start while the
	// broker's clients are already reconnecting, and on a saturated
	// machine one 16 MiB fetch outlasted the client's default 10 s. The
	// broker then exited at start, and stayed down.
	cl, err := kgo.NewClient(append(ClientOpts(), kgo.SeedBrokers(addrs...), kgo.RequestTimeoutOverhead(repairTimeout))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata: %w", err)
	}
	var open []openTransaction
	for _, t := range meta.Topics {
		if t.Topic == nil || t.IsInternal {
			continue
		}
		for _, p := range t.Partitions {
			found, err := scanPartition(ctx, cl.Broker(int(p.Leader)), *t.Topic, t.TopicID, p.Partition)
			if err != nil {
				return nil, err
			}
			open = append(open, found...)
		}
	}
	if len(open) == 0 {
		return nil, nil
	}
	byProducer := map[int64][]openTransaction{}
	for _, o := range open {
		byProducer[o.producerID] = append(byProducer[o.producerID], o)
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	for pid, txns := range byProducer {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed = pid, txns[0].epoch, false
		topics := map[string][]int32{}
		for _, o := range txns {
			topics[o.topic] = append(topics[o.topic], o.partition)
		}
		for topic, parts := range topics {
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic, mt.Partitions = topic, parts
			m.Topics = append(m.Topics, mt)
		}
		req.Markers = append(req.Markers, m)
	}
	// The embedded broker is one node: it leads every partition.
	resp, err := req.RequestWith(ctx, cl.Broker(int(meta.Brokers[0].NodeID)))
	if err != nil {
		return nil, fmt.Errorf("kafka: write abort markers: %w", err)
	}
	var errs []error
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("kafka: abort marker for producer %d on %s/%d: %w", m.ProducerID, t.Topic, p.Partition, err))
				}
			}
		}
	}
	sort.Slice(open, func(i, j int) bool {
		if open[i].topic != open[j].topic {
			return open[i].topic < open[j].topic
		}
		return open[i].partition < open[j].partition
	})
	return open, errors.Join(errs...)
}

// scanPartition reads a partition's batches from its start to its high
// watermark, headers only, and returns the transactions left open: a
// producer's transactional data batch not followed by a control batch of
// that producer.
func scanPartition(ctx context.Context, leader *kgo.Broker, topic string, topicID [16]byte, partition int32) ([]openTransaction, error) {
	open := map[int64]openTransaction{}
	offset := int64(0)
	for {
		rp, err := fetchRaw(ctx, leader, topic, topicID, partition, offset)
		if err != nil {
			return nil, err
		}
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			if errors.Is(err, kerr.OffsetOutOfRange) && offset < rp.LogStartOffset {
				offset = rp.LogStartOffset // retention removed the start
				continue
			}
			return nil, fmt.Errorf("kafka: read %s/%d at %d: %w", topic, partition, offset, err)
		}
		next := offset
		for b := rp.RecordBatches; len(b) >= 61; {
			// A batch is FirstOffset (8), Length (4), then Length bytes.
			size := 12 + int(int32(binary.BigEndian.Uint32(b[8:12])))
			if size < 61 || size > len(b) {
				break // the last batch is cut off at the response's size limit
			}
			var batch kmsg.RecordBatch
			if err := batch.ReadFrom(b[:size]); err != nil {
				return nil, fmt.Errorf("kafka: decode a batch of %s/%d: %w", topic, partition, err)
			}
			b = b[size:]
			end := batch.FirstOffset + int64(batch.LastOffsetDelta) + 1
			if end <= offset {
				continue
			}
			next = end
			const transactional, control = 0x10, 0x20
			switch {
			case batch.Attributes&control != 0:
				delete(open, batch.ProducerID)
			case batch.Attributes&transactional != 0:
				if _, ok := open[batch.ProducerID]; !ok {
					open[batch.ProducerID] = openTransaction{producerID: batch.ProducerID, epoch: batch.ProducerEpoch,
						topic: topic, partition: partition, first: batch.FirstOffset}
				}
			}
		}
		if next >= rp.HighWatermark {
			break
		}
		if next == offset {
			return nil, fmt.Errorf("kafka: read %s/%d at %d: no progress below the high watermark %d", topic, partition, offset, rp.HighWatermark)
		}
		offset = next
	}
	out := make([]openTransaction, 0, len(open))
	for _, o := range open {
		out = append(out, o)
	}
	return out, nil
}

// fetchRaw fetches one partition from offset with read_uncommitted, so
// every batch comes back, control batches included.
func fetchRaw(ctx context.Context, leader *kgo.Broker, topic string, topicID [16]byte, partition int32, offset int64) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MaxBytes = 16 << 20
	req.IsolationLevel = 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 16<<20
	rp.LogStartOffset, rp.CurrentLeaderEpoch = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, leader)
	if err != nil {
		return nil, fmt.Errorf("kafka: fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("kafka: fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	for _, t := range resp.Topics {
		for i := range t.Partitions {
			if t.Partitions[i].Partition == partition {
				return &t.Partitions[i], nil
			}
		}
	}
	return nil, fmt.Errorf("kafka: fetch %s/%d at %d: partition missing from the response", topic, partition, offset)
}

// repairTimeout bounds the scan and the markers at start.
const repairTimeout = 2 * time.Minute
