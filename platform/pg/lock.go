package pg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lock is a session-level advisory lock held on one dedicated connection, used
// to elect exactly one active runner (an outbox relay, a projection) among
// replicas.
//
// PostgreSQL releases a session lock when its session ends, so the lock is
// only as good as the connection: if the backend is terminated, the server
// restarts or the network drops, another replica can take the lock while this
// process still believes it holds it. Holders must therefore call Alive
// periodically (more often than they can tolerate overlapping with a
// successor) and stop working when it fails, and should run the statements
// that need mutual exclusion through Conn, so that they fail rather than run
// on another connection once the session is gone.
//
// Session locks do not survive transaction-mode connection poolers
// (PgBouncer pool_mode=transaction); Alive detects that case too because it
// checks pg_locks for the lock rather than only pinging.
type Lock struct {
	name string
	key  int64

	mu   sync.Mutex
	conn *pgxpool.Conn // nil once released
}

// releaseTimeout bounds the unlock in Release, which takes no context.
const releaseTimeout = 5 * time.Second

// TryLock acquires a connection from pool and tries pg_try_advisory_lock(key),
// where key is the FNV-64a hash of name (computed in Go, so any process using
// this package agrees on it; see lockKey). ok is false, and the connection is
// returned to the pool, when another session holds the lock.
//
// Session locks are re-entrant within a session but TryLock always uses a
// connection of its own, so a second TryLock for the same name from the same
// process reports ok=false too.
func TryLock(ctx context.Context, pool *pgxpool.Pool, name string) (l *Lock, ok bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("pg: lock %q: acquire connection: %w", name, err)
	}
	key := lockKey(name)
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
		// Unknown outcome (e.g. ctx cancelled after the server granted the
		// lock): closing the session guarantees the lock is not left behind.
		closeConn(conn)
		return nil, false, fmt.Errorf("pg: lock %q: %w", name, err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return &Lock{name: name, key: key, conn: conn}, true, nil
}

// Conn is the connection holding the lock; queries that must only run while
// the lock is held go through it. It is nil after Release. Do not Release or
// Hijack it, and do not use it concurrently (a pgx connection serves one query
// at a time).
func (l *Lock) Conn() *pgxpool.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
}

// Alive checks over the locked connection that this session still holds the
// lock. An error means the lock may be lost (the session died, or a pooler
// swapped the server session) and the holder must stop; call Release then.
// Cancelling ctx while the check runs closes the connection, which releases
// the lock, so give Alive a context that is not cancelled in the normal course
// of work.
func (l *Lock) Alive(ctx context.Context) error {
	l.mu.Lock()
	conn := l.conn
	l.mu.Unlock()
	if conn == nil {
		return fmt.Errorf("pg: lock %q: released", l.name)
	}
	// Advisory locks on a bigint key appear in pg_locks with the high 32
	// bits in classid, the low 32 bits in objid and objsubid 1.
	var held bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
		  AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1)`,
		int64(uint64(l.key)>>32), int64(uint32(l.key))).Scan(&held)
	if err != nil {
		return fmt.Errorf("pg: lock %q: connection lost, lock may be held by another session: %w", l.name, err)
	}
	if !held {
		return fmt.Errorf("pg: lock %q: no longer held by this session", l.name)
	}
	return nil
}

// Release unlocks and returns the connection to the pool, or closes it if the
// session is broken (closing the session releases the lock on the server
// anyway). Safe to call twice, and safe to call after Alive failed.
func (l *Lock) Release() {
	l.mu.Lock()
	conn := l.conn
	l.conn = nil
	l.mu.Unlock()
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var unlocked bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", l.key).Scan(&unlocked); err != nil || !unlocked {
		// Either the session is broken or it is not in the state we think:
		// do not hand it to someone else.
		closeConn(conn)
		return
	}
	conn.Release()
}

// closeConn removes conn from its pool and closes it, ending the server
// session and with it every session lock it held.
func closeConn(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// A Close error leaves nothing to do: the socket is closed regardless, and
	// the server ends the session when it notices.
	_ = c.Close(ctx)
}
