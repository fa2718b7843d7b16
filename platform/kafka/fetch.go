package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// IdleFetchWait is how long the broker holds a read model's fetch on a
// topic with nothing new before it answers empty: the pace at which an
// idle consumer asks again.
const IdleFetchWait = 100 * time.Millisecond

// batchFetchBytes is the fetch size a batching consumer waits for: more
// than a burst of events fills, so that under a steady load the wait, not
// the size, ends each fetch.
const batchFetchBytes = 1 << 20

// ReadModelFetch returns the fetch options of a consumer that applies a
// topic to a read model, one transaction per fetch.
//
// With batchWait 0 the broker answers as soon as a record is there. The
// read model trails its topic by the least, but on a topic whose records
// come one Kafka transaction at a time, as a relay under light load
// publishes them, nearly every record is a fetch and a transaction of its
// own, whose fixed cost (the offsets, BEGIN and COMMIT) outweighs the
// record's writes.
//
// With batchWait > 0 the broker holds each fetch until it has
// batchFetchBytes or batchWait has passed, so a consumer that keeps up
// applies at most one batch per batchWait, and trails the topic by up to
// that much more. A consumer that is behind still gets full fetches at
// once. docs/decisions/0119-read-models-off-the-request-path-gather-their-batches.md
func ReadModelFetch(batchWait time.Duration) []kgo.Opt {
	if batchWait <= 0 {
		return []kgo.Opt{kgo.FetchMaxWait(IdleFetchWait)}
	}
	return []kgo.Opt{kgo.FetchMaxWait(batchWait), kgo.FetchMinBytes(batchFetchBytes)}
}
