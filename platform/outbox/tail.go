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
	meta, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: list start offsets of %s: %w", topic, err)
	}
	// Read-committed end offsets: the last stable offset of each partition.
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: list end offsets of %s: %w", topic, err)
	}
	out := make(map[int32]Position, partitions)
	for _, p := range meta.Partitions {
		if p.Partition >= partitions {
			continue
		}
		start, _ := starts.Lookup(topic, p.Partition)
		end, _ := ends.Lookup(topic, p.Partition)
		pos, ok, err := lastInPartition(ctx, cl, topic, meta.TopicID, p.Partition, p.Leader, start.Offset, end.Offset)
		if err != nil {
			return nil, fmt.Errorf("outbox: read tail of %s/%d: %w", topic, p.Partition, err)
		}
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
	for window := int64(64); ; window *= 8 {
		from := max(start, end-window)
		pos, ok, err := lastInRange(ctx, cl, topic, topicID, partition, leader, from, end)
		if err != nil || ok {
			return pos, ok, err
		}
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
	for offset := from; offset < end; {
		rp, err := fetch(ctx, cl, topic, topicID, partition, leader, offset, 4<<20)
		if err != nil {
			return last, found, err
		}
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
		if next <= offset {
			return last, found, errors.New("fetch made no progress")
		}
		offset = next
	}
	return last, found, nil
}

func fetch(ctx context.Context, cl *kgo.Client, topic string, topicID [16]byte, partition, leader int32, offset int64, maxBytes int32) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
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
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

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
