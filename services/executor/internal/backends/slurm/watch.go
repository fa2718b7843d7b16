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
//
// How soon a start is seen is most of what Taskmesh adds to Slurm's own
// submit → RUNNING (docs/slurm.md#benchmark): on average half a poll.
// So while a followed job waits to start and the backend's jobs are on
// the move — one was submitted, started or ended within freshFor — the
// watcher polls every fast; once none has moved for freshFor (jobs
// waiting for resources that are not coming soon) or none waits to
// start, it backs off to interval, the poll of running jobs.
//
// A listing's cost grows with every job slurmctld knows, the backend's or
// not (slurmrestd renders each in full): so after each listing the
// watcher rests at least as long as it took, kicked or not, and
// slurmrestd spends at most half its time listing for it however long
// the queue (docs/slurm.md#how-soon-a-start-is-seen).
type watcher struct {
	client   jobLister
	interval time.Duration
	fast     time.Duration
	freshFor time.Duration
	log      *slog.Logger

	mu sync.Mutex
	// snapshot is the last successful listing, by job id.
	snapshot map[int64]Job
	// listedSince is when the request of the last successful listing was
	// sent: a job submitted before it and missing from it has vanished.
	listedSince time.Time
	// next is closed when the next listing (successful or not) is done.
	next chan struct{}
	// followed are the jobs followed, true while waiting to start;
	// starting counts those. lastMove is when a followed job was last
	// submitted or seen changing state.
	followed map[int64]bool
	starting int
	lastMove time.Time
	// lastEnd is when the last listing ended, lastTook how long it took.
	lastEnd  time.Time
	lastTook time.Duration
	kickCh   chan struct{}
}

// freshFor is how long the watcher keeps polling fast after the queue
// last moved.
const freshFor = 30 * time.Second

func newWatcher(client jobLister, interval, fast time.Duration, log *slog.Logger) *watcher {
	return &watcher{client: client, interval: interval, fast: min(fast, interval), freshFor: freshFor, log: log,
		snapshot: map[int64]Job{}, followed: map[int64]bool{}, next: make(chan struct{}), kickCh: make(chan struct{}, 1)}
}

// nextPoll is the delay before the next listing.
func (w *watcher) nextPoll(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.starting > 0 && now.Sub(w.lastMove) < w.freshFor {
		return max(w.fast, w.lastTook)
	}
	return max(w.interval, w.lastTook)
}

// rest is how long a kick waits: until the last listing has rested as
// long as it took.
func (w *watcher) rest(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastEnd.Add(w.lastTook).Sub(now)
}

// started says the followed job id runs: it no longer keeps the poll
// fast.
func (w *watcher) started(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.followed[id] {
		w.followed[id] = false
		w.starting--
	}
}

// run polls while anyone follows a job, and when kicked, until ctx ends.
func (w *watcher) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	kicked := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kickCh:
			kicked = true
			if rest := w.rest(time.Now()); rest > 0 {
				t.Reset(rest) // sooner than the next poll: nextPoll ≥ the rest
				continue
			}
		}
		w.mu.Lock()
		busy := len(w.followed) > 0
		w.mu.Unlock()
		if busy || kicked {
			w.poll(ctx)
		}
		kicked = false
		t.Reset(w.nextPoll(time.Now()))
	}
}

func (w *watcher) poll(ctx context.Context) {
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, max(w.interval*10, 30*time.Second))
	jobs, err := w.client.Jobs(cctx)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastEnd = time.Now()
	w.lastTook = w.lastEnd.Sub(sent)
	if err == nil {
		snapshot := make(map[int64]Job, len(jobs))
		for _, j := range jobs {
			snapshot[j.ID] = j
			// A start or end of any followed job counts, not only of the
			// waiting ones: an end frees resources, and Slurm starts jobs
			// in passes that one start shows are running.
			if _, ours := w.followed[j.ID]; ours {
				if old, ok := w.snapshot[j.ID]; ok && old.State != j.State {
					w.lastMove = sent
				}
			}
		}
		w.snapshot = snapshot
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

// follow registers a follower of job id, waiting for it to start until
// started; the returned func ends it. The watcher polls only while
// someone follows, and fast while a job of theirs waits to start.
func (w *watcher) follow(id int64) func() {
	w.mu.Lock()
	if _, ok := w.followed[id]; !ok {
		w.followed[id] = true
		w.starting++
	}
	w.lastMove = time.Now()
	w.mu.Unlock()
	w.kick()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if w.followed[id] {
				w.starting--
			}
			delete(w.followed, id)
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
