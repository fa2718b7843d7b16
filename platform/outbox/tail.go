package outbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// published is what a session knows of its relay's own records in Kafka.
// Several relays may publish to one topic (the quota service's quota and
// admission relays do), and their positions interleave, so only records
// carrying this relay's name in HeaderRelay count.
type published struct {
	// last is, per partition, the position of the relay's last record
	// found at start past the checkpoint's offsets: the events up to it in
	// that partition are in Kafka already (a predecessor committed them
	// after its last checkpoint) and are skipped, not repeated.
	last map[int32]Position
	// from and end are, per partition, where the start-up scan began (the
	// checkpoint's offset) and stopped (the high watermark once the
	// predecessor was fenced).
	from, end []int64
	// next is, per partition, the offset after the last record this session
	// committed; 0 while it has committed none there.
	next []int64
}

// offsets returns what a checkpoint at cursor stores: per partition, an
// offset below which no record of this relay comes after cursor. A
// successor reads each partition from there, so its scan covers what was
// published since the checkpoint, never the whole topic.
func (k *published) offsets(cursor Position) []int64 {
	out := make([]int64, len(k.end))
	for p := range out {
		last, found := k.last[int32(p)]
		switch {
		case k.next[p] > 0:
			out[p] = k.next[p]
		case found && cursor.Less(last):
			// Records found at start lie ahead of the cursor: the next
			// start must find them again.
			out[p] = k.from[p]
		default:
			out[p] = k.end[p]
		}
	}
	return out
}

// committed records that the records of one committed Kafka transaction
// are in; their offsets were set by the broker.
func (k *published) committed(records []*kgo.Record) {
	for _, rec := range records {
		k.next[rec.Partition] = rec.Offset + 1
	}
}

// stableWait is how often the start-up checks whether other producers'
// open transactions on the topic have finished.
const stableWait = 50 * time.Millisecond

// scanPublished reads every partition of topic from the checkpoint's offset
// (saved, indexed by partition; a missing one means the partition's start)
// to its high watermark, and returns the relay's own records found there
// past cursor (the checkpoint's), and how many records it found that name
// the relay but that confirm refused.
//
// A record's headers prove nothing: anything that may produce to the topic
// can write HeaderRelay and HeaderPosition. A position past the cursor
// makes the relay skip every event up to it in that partition, so only a
// record confirm matches to an event of the store (its position, event id,
// key and payload) counts; the scan tries them from the highest position
// down. Any other record naming the relay is logged and ignored: it can
// make the relay skip nothing (docs/decisions/0002-relay-in-commit-order.md).
//
// It must run after this relay's transactional producer fenced the
// predecessor, so no transaction of the predecessor can still commit. It
// reads with read_committed, so aborted batches are ignored; as such reads
// stop at the first open transaction, it first waits until the
// transactions other relays had open on the topic have finished (their
// records may precede records the predecessor committed).
func scanPublished(ctx context.Context, cl *kgo.Client, relay, topic string, partitions int32, saved []int64, cursor Position,
	confirm func(context.Context, ownRecord) (bool, error), log *slog.Logger) (*published, int, error) {
	// The partitions are read with raw fetch requests to each partition's
	// leader rather than with a consuming client: every read is bounded, at
	// an offset of our choosing, and answered at once, with no group, no
	// assignment and no client state. The metadata names each partition's
	// leader and the topic's id, which newer fetch versions use instead of
	// its name.
	meta, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		return nil, 0, err
	}
	adm := kadm.NewClient(cl)
	// The log start offset bounds the scan: what lies before it was removed
	// by retention and can never be read.
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: list start offsets of %s: %w", topic, err)
	}
	// High watermarks: after the fence every record the predecessor
	// committed lies below them.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: list end offsets of %s: %w", topic, err)
	}
	if err := waitStable(ctx, adm, topic, ends, relay, log); err != nil {
		return nil, 0, err
	}
	foreign := 0
	k := &published{last: map[int32]Position{}, from: make([]int64, partitions),
		end: make([]int64, partitions), next: make([]int64, partitions)}
	for _, p := range meta.Partitions {
		// partitions is the count the relay places records over
		// (kafka.PartitionFor); a partition added to the topic since it was
		// read holds none of this relay's records.
		if p.Partition >= partitions {
			continue
		}
		start, _ := starts.Lookup(topic, p.Partition)
		end, _ := ends.Lookup(topic, p.Partition)
		from := start.Offset
		if int(p.Partition) < len(saved) {
			// Clamped to the log: retention may have deleted the start, and
			// an offset past the end means the topic was recreated.
			from = min(max(from, saved[p.Partition]), end.Offset)
		}
		k.from[p.Partition], k.end[p.Partition] = from, end.Offset
		own, unreadable, err := ownRecords(ctx, cl, relay, topic, meta.TopicID, p.Partition, p.Leader, from, end.Offset, cursor)
		if err != nil {
			return nil, 0, fmt.Errorf("outbox: read %s/%d from offset %d: %w", topic, p.Partition, from, err)
		}
		pos, ok, refused, err := highestConfirmed(ctx, own, confirm)
		if err != nil {
			return nil, 0, fmt.Errorf("outbox: confirm the records of %s/%d: %w", topic, p.Partition, err)
		}
		if refused = append(unreadable, refused...); len(refused) > 0 {
			log.Warn("outbox relay ignores records that name it but are none of its events", "relay", relay, "topic", topic,
				"partition", p.Partition, "records", len(refused), "first_offset", slices.Min(refused))
			foreign += len(refused)
		}
		// A partition with no record of this relay past the checkpoint's
		// cursor gets no entry: every event that maps to it is published
		// up to the cursor, and the relay goes on from there.
		if ok {
			k.last[p.Partition] = pos
		}
	}
	return k, foreign, nil
}

// ownRecord is a record whose HeaderRelay names the relay, as the start-up
// scan found it: what confirm compares with the event store.
type ownRecord struct {
	pos     Position
	offset  int64
	eventID string
	key     string
	sum     [sha256.Size]byte // of the value
}

// highestConfirmed returns the highest position among own that confirm
// accepts, trying them from the highest down (normally the first is
// accepted), and the offsets of those it refused on the way.
func highestConfirmed(ctx context.Context, own []ownRecord, confirm func(context.Context, ownRecord) (bool, error)) (Position, bool, []int64, error) {
	slices.SortFunc(own, func(a, b ownRecord) int { return b.pos.Compare(a.pos) })
	var refused []int64
	for _, rec := range own {
		ok, err := confirm(ctx, rec)
		if err != nil {
			return Position{}, false, refused, err
		}
		if ok {
			return rec.pos, true, refused, nil
		}
		refused = append(refused, rec.offset)
	}
	return Position{}, false, refused, nil
}

// waitStable returns once every partition's last stable offset (the end of
// what read_committed can read) has reached ends. Transactions finish
// within their producer's transaction timeout, after which the broker
// aborts them.
func waitStable(ctx context.Context, adm *kadm.Client, topic string, ends kadm.ListedOffsets, relay string, log *slog.Logger) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for waited := false; ; waited = true {
		select {
		case <-ctx.Done():
			return fmt.Errorf("outbox: wait for open transactions on %s: %w", topic, ctx.Err())
		case <-timer.C:
		}
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = stable.Error()
		}
		if err != nil {
			return fmt.Errorf("outbox: list stable offsets of %s: %w", topic, err)
		}
		open := 0
		ends.Each(func(end kadm.ListedOffset) {
			if s, _ := stable.Lookup(topic, end.Partition); s.Offset < end.Offset {
				open++
			}
		})
		if open == 0 {
			return nil
		}
		if !waited {
			log.Info("outbox relay waits for open transactions on its topic", "relay", relay, "topic", topic, "partitions", open)
		}
		timer.Reset(stableWait)
	}
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

// ownRecords reads committed records from offset from up to end and returns
// those that name relay in HeaderRelay with a position past cursor (one at
// or before it can make the relay skip nothing), and the offsets of those
// naming relay whose position is missing or unreadable, which cannot be
// the relay's. Records of other relays, and records without a relay
// header, are not its own.
func ownRecords(ctx context.Context, cl *kgo.Client, relay, topic string, topicID [16]byte, partition, leader int32, from, end int64,
	cursor Position) (own []ownRecord, unreadable []int64, err error) {
	for offset := from; offset < end; {
		rp, err := fetch(ctx, cl, topic, topicID, partition, leader, offset, 4<<20)
		if err != nil {
			return nil, nil, err
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
			return nil, nil, fp.Err
		}
		for _, r := range fp.Records {
			// A batch comes back whole, so it may reach past end: those
			// records were produced after end was read.
			if r.Offset >= end {
				break
			}
			if name, ok := header(r, HeaderRelay); !ok || name != relay {
				continue
			}
			h, _ := header(r, HeaderPosition)
			p, err := ParsePosition(h)
			if err != nil {
				unreadable = append(unreadable, r.Offset)
				continue
			}
			if !cursor.Less(p) {
				continue
			}
			eventID, _ := header(r, HeaderEventID)
			own = append(own, ownRecord{pos: p, offset: r.Offset, eventID: eventID, key: string(r.Key), sum: sha256.Sum256(r.Value)})
		}
		// An answer that does not move the offset would loop forever: fail,
		// and let the session start over.
		if next <= offset {
			return nil, nil, errors.New("fetch made no progress")
		}
		offset = next
	}
	return own, unreadable, nil
}

func fetch(ctx context.Context, cl *kgo.Client, topic string, topicID [16]byte, partition, leader int32, offset int64, maxBytes int32) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	// A plain consumer's fetch (replica -1) that waits for nothing: with no
	// wait and no minimum size the broker answers at once with what it has,
	// which is what a bounded scan needs.
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
