package leader_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const lockName = "leader-test"

// candidate is one replica competing for the lock through leader.Run.
type candidate struct {
	t    *testing.T
	pool *pgxpool.Pool
	cfg  leader.Config

	cancel context.CancelFunc
	done   chan error // Run's result

	mu     sync.Mutex
	pauses []time.Duration
	paused chan struct{} // signalled at every pause
	// hold, when set, is what the pauses wait on instead of a short timer.
	hold <-chan time.Time
}

func newCandidate(t *testing.T, pool *pgxpool.Pool) *candidate {
	c := &candidate{t: t, pool: pool, paused: make(chan struct{}, 1)}
	c.cfg = leader.Config{Lock: lockName, Role: "test leader", Standby: 7 * time.Millisecond,
		MinBackoff: 3 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, After: c.after}
	return c
}

// after records the pause Run asks for and pauses briefly (or until hold).
func (c *candidate) after(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.pauses = append(c.pauses, d)
	hold := c.hold
	c.mu.Unlock()
	select {
	case c.paused <- struct{}{}:
	default: // a signal is pending already
	}
	if hold != nil {
		return hold
	}
	return time.After(time.Millisecond)
}

func (c *candidate) pausesSoFar() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pauses)
}

func (c *candidate) run(session leader.Session) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan error, 1)
	go func() { c.done <- leader.Run(ctx, c.pool, c.cfg, session) }()
	c.t.Cleanup(func() {
		cancel()
		<-c.done
	})
}

// stop cancels Run and waits for it to return nil.
func (c *candidate) stop() {
	c.t.Helper()
	c.cancel()
	select {
	case err := <-c.done:
		if err != nil {
			c.t.Errorf("Run returned %v after cancel, want nil", err)
		}
		c.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		c.t.Fatal("Run did not return after its context was cancelled")
	}
}

// waitPauses waits until the candidate has paused n times.
func (c *candidate) waitPauses(n int) {
	c.t.Helper()
	for len(c.pausesSoFar()) < n {
		select {
		case <-c.paused:
		case <-time.After(20 * time.Second):
			c.t.Fatalf("%d pauses, waited for %d", len(c.pausesSoFar()), n)
		}
	}
}

// tenures counts sessions running at once.
type tenures struct {
	active, most atomic.Int32
	entered      chan string
}

func newTenures() *tenures { return &tenures{entered: make(chan string, 100)} }

// session holds the lead as who until ctx is done, checking the lock.
func (s *tenures) session(who string) leader.Session {
	return func(ctx context.Context, lock *pg.Lock) error {
		n := s.active.Add(1)
		defer s.active.Add(-1)
		for {
			m := s.most.Load()
			if n <= m || s.most.CompareAndSwap(m, n) {
				break
			}
		}
		s.entered <- who
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				if err := lock.Alive(context.WithoutCancel(ctx)); err != nil {
					return err
				}
			}
		}
	}
}

func (s *tenures) waitEntered(t *testing.T, want string) {
	t.Helper()
	select {
	case who := <-s.entered:
		if who != want {
			t.Fatalf("%s took the lead, want %s", who, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never took the lead", want)
	}
}

// Two replicas compete: only one runs its session; the other stands by,
// asking again every Standby, and takes over once the leader stops.
func TestOnlyOneCandidateLeads(t *testing.T) {
	db := pgtest.New(t)
	a, b := newCandidate(t, db.Open(t, "")), newCandidate(t, db.Open(t, ""))
	s := newTenures()
	a.run(s.session("a"))
	s.waitEntered(t, "a")
	b.run(s.session("b"))
	b.waitPauses(3)
	select {
	case who := <-s.entered:
		t.Fatalf("%s took the lead while a held it", who)
	default:
	}
	for _, d := range b.pausesSoFar() {
		if d != b.cfg.Standby {
			t.Fatalf("standby pauses = %v, want each %v", b.pausesSoFar(), b.cfg.Standby)
		}
	}
	a.stop()
	s.waitEntered(t, "b")
	if m := s.most.Load(); m != 1 {
		t.Errorf("%d sessions ran at once", m)
	}
	b.stop()
}

// When the leader's database session dies (failover, an administrator's
// pg_terminate_backend), the server frees the lock: the standby takes over,
// and the old leader's session learns it lost the lock and backs off.
func TestStandbyTakesOverWhenTheLeadersSessionDies(t *testing.T) {
	db := pgtest.New(t)
	admin := db.Open(t, "")
	a, b := newCandidate(t, db.Open(t, "")), newCandidate(t, db.Open(t, ""))
	never := make(chan time.Time)
	a.hold = never // a must not take the lock back before b does
	pids := make(chan int, 1)
	var lost atomic.Value
	s := newTenures()
	a.run(func(ctx context.Context, lock *pg.Lock) error {
		var pid int
		if err := lock.Conn().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		pids <- pid
		err := s.session("a")(ctx, lock)
		lost.Store(err)
		return err
	})
	s.waitEntered(t, "a")
	b.run(s.session("b"))
	b.waitPauses(1)

	var terminated bool
	if err := admin.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, <-pids).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend = %v, %v", terminated, err)
	}
	s.waitEntered(t, "b")
	a.waitPauses(1)
	if err, _ := lost.Load().(error); err == nil {
		t.Error("the old leader's session ended without an error")
	}
	if got := a.pausesSoFar(); got[0] != a.cfg.MinBackoff {
		t.Errorf("old leader paused %v, want the backoff %v", got, a.cfg.MinBackoff)
	}
	b.stop()
	a.stop()
}

// Failures back off: the pause doubles up to MaxBackoff and starts again
// from MinBackoff after a session that ends without error.
func TestBackoffDoublesOnFailureAndResetsAfterACleanSession(t *testing.T) {
	c := newCandidate(t, pgtest.New(t).Open(t, ""))
	c.cfg.MinBackoff, c.cfg.MaxBackoff, c.cfg.Standby = 100*time.Millisecond, time.Second, 30*time.Second
	ready := make(chan time.Time)
	close(ready)
	c.hold = ready // pauses end at once: no sleeping
	var calls atomic.Int32
	c.run(func(ctx context.Context, lock *pg.Lock) error {
		if n := calls.Add(1); n == 6 {
			return nil
		}
		return errors.New("kafka unreachable")
	})
	c.waitPauses(7)
	c.stop()
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, 30 * time.Second, 100 * ms}
	if got := c.pausesSoFar()[:len(want)]; !slices.Equal(got, want) {
		t.Errorf("pauses = %v, want %v", got, want)
	}
}

// A lock that cannot even be asked for (the database is unreachable) is a
// failure too: backoff, no session.
func TestBackoffWhenTheLockCannotBeAsked(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	pool.Close()
	c := newCandidate(t, pool)
	var calls atomic.Int32
	c.run(func(context.Context, *pg.Lock) error {
		calls.Add(1)
		return nil
	})
	c.waitPauses(4)
	c.stop()
	want := []time.Duration{3 * time.Millisecond, 6 * time.Millisecond, 12 * time.Millisecond, 24 * time.Millisecond}
	if got := c.pausesSoFar()[:len(want)]; !slices.Equal(got, want) {
		t.Errorf("pauses = %v, want %v", got, want)
	}
	if calls.Load() != 0 {
		t.Errorf("session ran %d times without the lock", calls.Load())
	}
}

// Cancelling the context ends the session and Run, and frees the lock; a
// replica cancelled while standing by returns too.
func TestRunStopsCleanlyWhenCancelled(t *testing.T) {
	db := pgtest.New(t)
	leaderPool, standbyPool := db.Open(t, ""), db.Open(t, "")
	a, b := newCandidate(t, leaderPool), newCandidate(t, standbyPool)
	b.hold = make(chan time.Time) // b stands by until cancelled
	s := newTenures()
	a.run(s.session("a"))
	s.waitEntered(t, "a")
	b.run(s.session("b"))
	b.waitPauses(1)
	b.stop()
	a.stop()
	if n := s.active.Load(); n != 0 {
		t.Errorf("%d sessions still running after Run returned", n)
	}
	lock, ok, err := pg.TryLock(context.Background(), standbyPool, lockName)
	if err != nil || !ok {
		t.Fatalf("lock not free after Run returned: ok=%v err=%v", ok, err)
	}
	lock.Release()
}

func TestRunRefusesAConfigWithoutALock(t *testing.T) {
	err := leader.Run(context.Background(), nil, leader.Config{}, func(context.Context, *pg.Lock) error { return nil })
	if err == nil {
		t.Fatal("Run without a lock name returned nil")
	}
}
