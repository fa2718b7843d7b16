// Package leader runs a piece of work on one replica at a time: the replica
// whose session holds a PostgreSQL advisory lock (pg.TryLock). The outbox
// relay, the projection runners and the quota service's admission loop each
// run as such a leader, so that exactly one of them publishes, projects or
// decides while the others stand by.
//
// The lock is a session lock on one dedicated connection, so leadership
// lasts exactly as long as that connection's server session: when the
// process dies, the network drops or an administrator terminates the
// backend, the server releases the lock and a standby takes over within its
// standby interval. The old leader may not notice at once; that is why a
// Session does its exclusive work through lock.Conn() (whose statements then
// fail instead of running beside the successor) and checks lock.Alive when
// it would otherwise sit idle.
package leader

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// Session is one tenure as the leader, called while lock is held; the lock
// is released when it returns.
//
// It returns nil when ctx is done, or when its tenure is over for a reason
// that is not a failure; it returns an error when it had to stop (its
// connection broke, the lock is no longer held, a dependency failed). Either
// way Run takes the lock again after a pause, so a session never retries on
// its own.
type Session func(ctx context.Context, lock *pg.Lock) error

// Config configures Run.
type Config struct {
	// Lock names the advisory lock that elects the leader, one per piece of
	// work (e.g. "outbox:scheduler"). Every replica must use the same name.
	Lock string
	// Role names the work in log lines (e.g. "outbox relay").
	Role string
	// Standby is how long a replica waits before it asks for the lock
	// again when another replica holds it, or after a session that ended
	// without error (default 1s). It bounds how long a takeover takes.
	Standby time.Duration
	// MinBackoff and MaxBackoff bound the pause after a failure (the lock
	// could not be asked for, or the session returned an error): the
	// first pause is MinBackoff, each further failure in a row doubles it
	// up to MaxBackoff, and a session that ends without error starts
	// again from MinBackoff (defaults 100ms and 5s). Equal values give a
	// constant pause.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	// After returns a channel that delivers once d has passed; nil means
	// time.After. Tests inject it to observe the pauses without sleeping.
	After func(d time.Duration) <-chan time.Time
}

func (c *Config) defaults() {
	if c.Standby <= 0 {
		c.Standby = time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	switch {
	case c.MaxBackoff <= 0:
		c.MaxBackoff = max(5*time.Second, c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		c.MaxBackoff = c.MinBackoff
	}
	if c.Role == "" {
		c.Role = c.Lock
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.After == nil {
		c.After = time.After
	}
}

// Run competes for the lock with every other replica using the same name
// and runs session whenever it wins, until ctx is done. Step by step:
//
//  1. Ask for the lock (pg.TryLock, on a connection of its own from pool).
//  2. Another replica holds it: wait Standby, go to 1. The lock could not
//     be asked for (Postgres unreachable): log, wait the backoff, go to 1.
//  3. Held: run session. The lock stays held for as long as it runs, and
//     only then.
//  4. The session returned: release the lock (a broken connection is
//     closed instead, which frees the lock on the server as well). If ctx
//     is done, return. On an error, log it and wait the backoff, which
//     doubles with each failure in a row; otherwise reset the backoff and
//     wait Standby. Go to 1.
//
// Pausing between tenures, also after a clean one, gives the standbys a
// chance to take over and keeps a session that fails at once from spinning.
// Run returns nil once ctx is done; an error only for a config it cannot
// run (no lock name).
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, session Session) error {
	if cfg.Lock == "" {
		return errors.New("leader: no lock name")
	}
	cfg.defaults()
	backoff := cfg.MinBackoff
	for ctx.Err() == nil {
		held, err := tenure(ctx, pool, cfg.Lock, session)
		if ctx.Err() != nil {
			return nil
		}
		wait := cfg.Standby
		switch {
		case err != nil:
			cfg.Logger.Warn(cfg.Role+" stopped; retrying", "lock", cfg.Lock, "err", err, "retry_in", backoff)
			wait = backoff
			backoff = min(backoff*2, cfg.MaxBackoff)
		case held:
			backoff = cfg.MinBackoff
		}
		select {
		case <-ctx.Done():
		case <-cfg.After(wait):
		}
	}
	return nil
}

// tenure is steps 1, 3 and the release of step 4: held reports whether the
// lock was obtained.
func tenure(ctx context.Context, pool *pgxpool.Pool, name string, session Session) (held bool, err error) {
	lock, ok, err := pg.TryLock(ctx, pool, name)
	if err != nil || !ok {
		return false, err
	}
	defer lock.Release()
	return true, session(ctx, lock)
}
