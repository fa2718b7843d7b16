package slurm

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// listing is a jobLister whose answer the test sets.
type listing struct {
	mu   sync.Mutex
	jobs []Job
}

func (l *listing) set(jobs ...Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs = jobs
}

func (l *listing) Jobs(context.Context) ([]Job, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Job(nil), l.jobs...), nil
}

// The poll is fast while a followed job waits to start and the backend's
// jobs moved within freshFor, and the slow interval otherwise: once
// every followed job runs, or when none has moved for freshFor (it waits
// for resources that are not coming soon). A followed job changing state
// makes it fast again; another user's job does not.
func TestWatcherPollsFastWhileJobsWaitToStart(t *testing.T) {
	l := &listing{}
	w := newWatcher(l, time.Second, 100*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	if d := w.nextPoll(time.Now()); d != time.Second {
		t.Fatalf("nothing followed: poll %s, want 1s", d)
	}
	l.set(Job{ID: 1, State: StatePending}, Job{ID: 2, State: StateRunning}, Job{ID: 9, State: StatePending})
	unfollow1 := w.follow(1)
	unfollow2 := w.follow(2)
	w.poll(ctx)
	if d := w.nextPoll(time.Now()); d != 100*time.Millisecond {
		t.Fatalf("jobs just submitted, waiting: poll %s, want 100ms", d)
	}
	if d := w.nextPoll(time.Now().Add(freshFor + time.Second)); d != time.Second {
		t.Fatalf("nothing moved for %s: poll %s, want 1s", freshFor, d)
	}

	// Another user's job moving is not the backend's jobs moving.
	w.mu.Lock()
	w.lastMove = time.Now().Add(-time.Hour)
	w.mu.Unlock()
	l.set(Job{ID: 1, State: StatePending}, Job{ID: 2, State: StateRunning}, Job{ID: 9, State: StateRunning})
	w.poll(ctx)
	if d := w.nextPoll(time.Now()); d != time.Second {
		t.Fatalf("only another user's job moved: poll %s, want 1s", d)
	}
	// A followed job ending frees resources: the waiting one may start.
	l.set(Job{ID: 1, State: StatePending}, Job{ID: 2, State: StateCompleted}, Job{ID: 9, State: StateRunning})
	w.poll(ctx)
	if d := w.nextPoll(time.Now()); d != 100*time.Millisecond {
		t.Fatalf("a followed job ended while another waits: poll %s, want 100ms", d)
	}
	unfollow2()

	// Every followed job runs: back to the slow poll.
	w.started(1)
	w.started(1)
	if d := w.nextPoll(time.Now()); d != time.Second {
		t.Fatalf("every followed job runs: poll %s, want 1s", d)
	}
	unfollow1()
	unfollow1()
	w.mu.Lock()
	starting, followed := w.starting, len(w.followed)
	w.mu.Unlock()
	if starting != 0 || followed != 0 {
		t.Fatalf("after unfollowing: %d starting, %d followed", starting, followed)
	}
	// A pending job unfollowed (its attempt ended) stops counting too.
	unfollow3 := w.follow(3)
	unfollow3()
	if d := w.nextPoll(time.Now()); d != time.Second {
		t.Fatalf("the waiting job's follower left: poll %s, want 1s", d)
	}
}

// slowListing answers after delay, as slurmrestd does with a long queue.
type slowListing struct {
	listing
	delay time.Duration
}

func (l *slowListing) Jobs(ctx context.Context) ([]Job, error) {
	time.Sleep(l.delay)
	return l.listing.Jobs(ctx)
}

// After a listing the watcher rests at least as long as it took, whether
// the next one is due to the fast poll or to a kick: slurmrestd, whose
// listing grows with the queue, spends at most half its time on it.
func TestWatcherRestsAsLongAsAListingTook(t *testing.T) {
	l := &slowListing{delay: 150 * time.Millisecond}
	l.set(Job{ID: 1, State: StatePending})
	w := newWatcher(l, time.Second, 10*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer w.follow(1)()
	w.poll(context.Background())
	now := time.Now()
	if d := w.nextPoll(now); d < 150*time.Millisecond {
		t.Fatalf("waiting job, after a 150ms listing: poll in %s, want ≥ 150ms", d)
	}
	w.mu.Lock()
	took := w.lastTook
	w.mu.Unlock()
	if d := w.rest(now); d <= 0 || d > took {
		t.Fatalf("a kick right after a %s listing waits %s, want (0, %s]", took, d, took)
	}
	if d := w.rest(now.Add(took)); d > 0 {
		t.Fatalf("a kick once the rest is over waits %s, want none", d)
	}
	// A listing slower than the slow poll sets the pace too.
	l.delay = 0
	w.mu.Lock()
	w.lastTook = 3 * time.Second
	w.mu.Unlock()
	w.started(1)
	if d := w.nextPoll(time.Now()); d != 3*time.Second {
		t.Fatalf("every job runs, listings take 3s: poll in %s, want 3s", d)
	}
}
