package pg

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// Close races with senders: a send either queues its command, which a
// worker then receives, or answers ErrCommitterClosed — it never panics on
// the closed queue, and nothing accepted is lost.
func TestWorkQueuesCloseWhileSending(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 200; round++ {
		q := newWorkQueues[int](2, 1)
		var received, accepted atomic.Int64
		var workers, senders sync.WaitGroup
		for _, ch := range q.chans {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for range ch {
					received.Add(1)
				}
			}()
		}
		for i := range 8 {
			senders.Add(1)
			go func() {
				defer senders.Done()
				for j := range 50 {
					switch err := q.send(ctx, (i+j)%2, j); {
					case err == nil:
						accepted.Add(1)
					case !errors.Is(err, ErrCommitterClosed):
						t.Errorf("send: %v", err)
					}
				}
			}()
		}
		q.close()
		q.close() // twice is a no-op
		senders.Wait()
		workers.Wait()
		if received.Load() != accepted.Load() {
			t.Fatalf("round %d: %d commands accepted, %d received", round, accepted.Load(), received.Load())
		}
	}
}

// A send blocked on a full queue gives up when its context ends.
func TestWorkQueuesSendHonoursContext(t *testing.T) {
	q := newWorkQueues[int](1, 1)
	if err := q.send(context.Background(), 0, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.send(ctx, 0, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("send to a full queue with an ended context: %v", err)
	}
	<-q.chans[0]
	q.close()
	if err := q.send(context.Background(), 0, 3); !errors.Is(err, ErrCommitterClosed) {
		t.Fatalf("send after close: %v", err)
	}
}
