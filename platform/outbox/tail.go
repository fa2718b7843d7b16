package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lastPublished reads, for every partition of topic, the position header of
// the last committed record, so a relay that starts after a crash skips what
// its predecessor already committed to Kafka but had not yet checkpointed.
//
// It must run after this relay's transactional producer fenced the
// predecessor (so no transaction of the predecessor can still commit), and it
// reads with read_committed so aborted batches are ignored.
func lastPublished(ctx context.Context, cl *kgo.Client, topic string, partitions int32) (map[int32]Position, error) {
	// The tail is read with raw fetch requests to each partition's leader
	// rather than with a consuming client: every window is one bounded read
	// at an offset of our choosing that the broker answers at once, with no
	// group, no assignment and no client state to reset between windows.
	// The metadata names each partition's leader and the topic's id, which
	// newer fetch versions use instead of its name.
	meta, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	// The log start offset bounds the backwards scan: what lies before it
	// was removed by retention and can never be read.
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: list start offsets of %s: %w", topic, err)
	}
	// Read-committed end offsets: the last stable offset of each partition.
	// Below it every transaction is decided: after the fence none of a
	// predecessor's is still open, and an aborted one is dropped by the
	// read_committed filter in lastInRange.
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: list end offsets of %s: %w", topic, err)
	}
	out := make(map[int32]Position, partitions)
	for _, p := range meta.Partitions {
		// partitions is the count the relay places records over
		// (kafka.PartitionFor); a partition added to the topic since it was
		// read holds none of this relay's records.
		if p.Partition >= partitions {
			continue
		}
		start, _ := starts.Lookup(topic, p.Partition)
		end, _ := ends.Lookup(topic, p.Partition)
		pos, ok, err := lastInPartition(ctx, cl, topic, meta.TopicID, p.Partition, p.Leader, start.Offset, end.Offset)
		if err != nil {
			return nil, fmt.Errorf("outbox: read tail of %s/%d: %w", topic, p.Partition, err)
		}
		// A partition with no position header (empty, trimmed by retention,
		// or holding only other producers' records) gets no entry: every
		// event that maps to it is published.
		if ok {
			out[p.Partition] = pos
		}
	}
	return out, nil
}

func topicMetadata(ctx context.Context, cl *kgo.Client, topic string) (kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kmsg.MetadataResponseTopic{}, fmt.Errorf("outbox: metadata %s: %w", topic, err)
	}
	for _, rt := range resp.Topics {
		if rt.Topic != nil && *rt.Topic == topic {
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
				return rt, fmt.Errorf("outbox: metadata %s: %w", topic, err)
			}
			return rt, nil
		}
	}
	return kmsg.MetadataResponseTopic{}, fmt.Errorf("outbox: metadata %s: topic missing from response", topic)
}

// lastInPartition scans backwards in growing windows from the last stable
// offset until it finds a committed data record carrying a position header.
func lastInPartition(ctx context.Context, cl *kgo.Client, topic string, topicID [16]byte, partition, leader int32, start, end int64) (Position, bool, error) {
	if end <= start {
		return Position{}, false, nil
	}
	// Windows grow eightfold from 64 records. The last record usually
	// carries a header, so the common case is one small read; a tail of
	// records without one (another producer's, or offsets taken by
	// transaction markers) costs a few reads more, not a scan of the whole
	// partition. Each window re-reads the previous one; the geometric growth
	// keeps that to a constant factor.
	for window := int64(64); ; window *= 8 {
		from := max(start, end-window)
		pos, ok, err := lastInRange(ctx, cl, topic, topicID, partition, leader, from, end)
		if err != nil || ok {
			return pos, ok, err
		}
		// The whole retained log was read without finding a header.
		if from == start {
			return Position{}, false, nil
		}
	}
}

func lastInRange(ctx context.Context, cl *kgo.Client, topic string, topicID [16]byte, partition, leader int32, from, end int64) (Position, bool, error) {
	var (
		last  Position
		found bool
	)
	// The last header in [from, end) wins: within a partition positions grow
	// with the offset, because one relay at a time produces and it produces
	// in Position order.
	for offset := from; offset < end; {
		rp, err := fetch(ctx, cl, topic, topicID, partition, leader, offset, 4<<20)
		if err != nil {
			return last, found, err
		}
		// ProcessFetchPartition decodes the batches and, with ReadCommitted,
		// drops the records of the aborted transactions the response lists;
		// transaction markers are never returned as records.
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         offset,
			IsolationLevel: kgo.ReadCommitted(),
			Topic:          topic,
			Partition:      partition,
		}, rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return last, found, fp.Err
		}
		for _, r := range fp.Records {
			// A batch comes back whole, so it may reach past end: those
			// records belong to transactions that were not yet decided when
			// end was read.
			if r.Offset >= end {
				break
			}
			if h, ok := header(r, HeaderPosition); ok {
				p, err := ParsePosition(h)
				if err != nil {
					return last, found, err
				}
				last, found = p, true
			}
		}
		// An answer that does not move the offset would loop forever: fail,
		// and let the session start over.
		if next <= offset {
			return last, found, errors.New("fetch made no progress")
		}
		offset = next
	}
	return last, found, nil
}

func fetch(ctx context.Context, cl *kgo.Client, topic string, topicID [16]byte, partition, leader int32, offset int64, maxBytes int32) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	// A plain consumer's fetch (replica -1) that waits for nothing: with no
	// wait and no minimum size the broker answers at once with what it has,
	// which is what a bounded backwards scan needs.
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = maxBytes
	req.IsolationLevel = 1 // read_committed
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.FetchOffset = offset
	// No epoch checks: this is a one-off read at a known offset, not a
	// consumer that has to notice log truncation.
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	// To the leader named by the metadata just read. If leadership moved
	// since, the partition's error code says so and the session starts over
	// with fresh metadata.
	resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			if p.Partition == partition {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, err
				}
				return p, nil
			}
		}
	}
	return nil, errors.New("partition missing from fetch response")
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}
