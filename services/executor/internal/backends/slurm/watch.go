package slurm

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// jobLister is the one call the watcher makes.
type jobLister interface {
	Jobs(ctx context.Context) ([]Job, error)
}

// watcher polls slurmctld's job list for every attempt at once: one
// request per interval however many jobs the backend follows, instead of
// one per job. Followers read the latest snapshot and wait for the next.
type watcher struct {
	client   jobLister
	interval time.Duration
	log      *slog.Logger

	mu sync.Mutex
	// snapshot is the last successful listing, by job id.
	snapshot map[int64]Job
	// listedSince is when the request of the last successful listing was
	// sent: a job submitted before it and missing from it has vanished.
	listedSince time.Time
	// next is closed when the next listing (successful or not) is done.
	next    chan struct{}
	waiters int
	kickCh  chan struct{}
}

func newWatcher(client jobLister, interval time.Duration, log *slog.Logger) *watcher {
	return &watcher{client: client, interval: interval, log: log, snapshot: map[int64]Job{},
		next: make(chan struct{}), kickCh: make(chan struct{}, 1)}
}

// run polls while anyone follows a job, and when kicked, until ctx ends.
func (w *watcher) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kickCh:
			kicked = true
		}
		w.mu.Lock()
		busy := w.waiters > 0
		w.mu.Unlock()
		if busy || kicked {
			w.poll(ctx)
		}
		t.Reset(w.interval)
	}
}

func (w *watcher) poll(ctx context.Context) {
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, max(w.interval*10, 30*time.Second))
	jobs, err := w.client.Jobs(cctx)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.snapshot = make(map[int64]Job, len(jobs))
		for _, j := range jobs {
			w.snapshot[j.ID] = j
		}
		w.listedSince = sent
	} else if ctx.Err() == nil {
		w.log.Warn("list Slurm jobs", "err", err)
	}
	close(w.next)
	w.next = make(chan struct{})
}

// kick asks for a listing now (after a submit or a cancel).
func (w *watcher) kick() {
	select {
	case w.kickCh <- struct{}{}:
	default:
	}
}

// follow registers a follower; the returned func ends it. The watcher
// polls only while someone follows.
func (w *watcher) follow() func() {
	w.mu.Lock()
	w.waiters++
	w.mu.Unlock()
	w.kick()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.waiters--
			w.mu.Unlock()
		})
	}
}

// job returns the job as last listed. known is false when the last
// listing was sent before since (it cannot say yet); listed is false when
// a listing after since did not have it. next is closed by the next
// listing.
func (w *watcher) job(id int64, since time.Time) (j Job, listed, known bool, next <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	j, listed = w.snapshot[id]
	known = !w.listedSince.IsZero() && !w.listedSince.Before(since)
	return j, listed, known, w.next
}

// jobs returns the last listing, after waiting for one that was sent at
// or after since.
func (w *watcher) jobsSince(ctx context.Context, since time.Time) ([]Job, error) {
	for {
		w.mu.Lock()
		ok := !w.listedSince.IsZero() && !w.listedSince.Before(since)
		next := w.next
		var out []Job
		if ok {
			out = make([]Job, 0, len(w.snapshot))
			for _, j := range w.snapshot {
				out = append(out, j)
			}
		}
		w.mu.Unlock()
		if ok {
			return out, nil
		}
		w.kick()
		select {
		case <-next:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
