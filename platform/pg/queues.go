package pg

import (
	"context"
	"sync"
)

// workQueues are the per-worker command queues of a GroupCommitter or a
// KeyedBatcher. They exist so that Close can shut the queues while callers
// are sending: closing a channel that a concurrent send may pick in a
// select panics, so every send happens under a read lock and close takes
// the write lock. A send blocked on a full queue holds the read lock only
// until a worker takes a command — workers never wait on this lock — so
// Close waits at most that long.
type workQueues[T any] struct {
	mu     sync.RWMutex
	closed bool
	chans  []chan T
}

func newWorkQueues[T any](workers, capacity int) *workQueues[T] {
	q := &workQueues[T]{chans: make([]chan T, workers)}
	for i := range q.chans {
		q.chans[i] = make(chan T, capacity)
	}
	return q
}

// send queues v for worker i. It blocks while that queue is full
// (back-pressure rather than an unbounded queue in memory) and answers
// ErrCommitterClosed once the queues are closed, or ctx's error.
func (q *workQueues[T]) send(ctx context.Context, i int, v T) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return ErrCommitterClosed
	}
	select {
	case q.chans[i] <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops sends; workers ranging over their queue finish what is
// queued and then see it closed. Closing twice is a no-op.
func (q *workQueues[T]) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	for _, ch := range q.chans {
		close(ch)
	}
}

// serveBatches runs batch on what ch brings until ch is closed. A batch is
// whatever arrived while the previous one ran, taken without waiting: one
// command and no added latency under light load, up to limit by itself
// under heavy load.
func serveBatches[T any](ch <-chan T, limit int, batch func([]T)) {
	for first := range ch {
		b := []T{first}
	drain:
		for len(b) < limit {
			select {
			case c, ok := <-ch:
				if !ok {
					break drain
				}
				b = append(b, c)
			default:
				break drain
			}
		}
		batch(b)
	}
}
