package pg

import (
	"context"
	"errors"
	"fmt"
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

// A batch is what waits when the worker is free, up to the limit; a lone
// command is a batch of its own, and the worker ends once the queue is
// closed and drained.
func TestServeBatchesTakesWhatWaitsUpToTheLimit(t *testing.T) {
	ch := make(chan int, 10)
	for i := range 7 {
		ch <- i
	}
	close(ch)
	var got [][]int
	serveBatches(ch, 3, func(b []int) { got = append(got, append([]int(nil), b...)) })
	want := "[[0 1 2] [3 4 5] [6]]"
	if s := fmt.Sprint(got); s != want {
		t.Fatalf("batches = %s, want %s", s, want)
	}

	// Nothing waiting: the first command runs at once, alone.
	ch = make(chan int, 10)
	done := make(chan struct{})
	batches := make(chan []int, 10)
	go func() { defer close(done); serveBatches(ch, 3, func(b []int) { batches <- b }) }()
	ch <- 42
	if b := <-batches; fmt.Sprint(b) != "[42]" {
		t.Fatalf("lone command's batch = %v, want [42]", b)
	}
	close(ch)
	<-done
}
