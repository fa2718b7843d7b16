package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

func mustLock(t *testing.T, pool *pgxpool.Pool, name string) *pg.Lock {
	t.Helper()
	l, ok, err := pg.TryLock(testCtx(t), pool, name)
	if err != nil || !ok {
		t.Fatalf("TryLock(%q) = %v, %v; want the lock", name, ok, err)
	}
	t.Cleanup(l.Release)
	return l
}

func wantLocked(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	l, ok, err := pg.TryLock(testCtx(t), pool, name)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		l.Release()
		t.Fatalf("TryLock(%q) succeeded while another session holds it", name)
	}
	if l != nil {
		t.Error("TryLock returned a Lock with ok=false")
	}
}

// TestTryLockIsExclusive plays two replicas, each with its own pool.
func TestTryLockIsExclusive(t *testing.T) {
	db := pgtest.New(t)
	replicaA, replicaB := db.Open(t, ""), db.Open(t, "")
	ctx := testCtx(t)

	l := mustLock(t, replicaA, "relay")
	wantLocked(t, replicaB, "relay")
	wantLocked(t, replicaA, "relay") // another connection of the same pool is another session
	if err := l.Alive(ctx); err != nil {
		t.Errorf("Alive on a held lock: %v", err)
	}
	other := mustLock(t, replicaB, "projection") // names are independent
	other.Release()

	// Queries that need the lock go through its connection.
	var pid int
	if err := l.Conn().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}

	l.Release()
	l.Release() // safe twice
	if l.Conn() != nil {
		t.Error("Conn after Release is not nil")
	}
	if err := l.Alive(ctx); err == nil {
		t.Error("Alive after Release reported no error")
	}
	mustLock(t, replicaB, "relay")
}

// TestReleaseReturnsTheConnection checks, with a single-connection pool, that
// both a refused TryLock and Release hand the connection back, unlocked.
func TestReleaseReturnsTheConnection(t *testing.T) {
	db := pgtest.New(t)
	ctx := testCtx(t)
	single, err := pg.Open(ctx, pg.Config{URL: db.URL, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	other := db.Open(t, "")

	held := mustLock(t, other, "runner")
	wantLocked(t, single, "runner")
	held.Release()

	l := mustLock(t, single, "runner")
	l.Release()
	acquireCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := single.Ping(acquireCtx); err != nil {
		t.Fatalf("connection not returned to the pool: %v", err)
	}
	if n := queryInt(t, single, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`); n != 0 {
		t.Errorf("returned connection still holds %d advisory locks", n)
	}
	mustLock(t, other, "runner")
}

// TestLockLostWhenSessionDies terminates the holder's backend, as a
// failover or an administrator would: another replica can take the lock,
// Alive tells the old holder to stop, and Release cleans up.
func TestLockLostWhenSessionDies(t *testing.T) {
	db := pgtest.New(t)
	replicaA, replicaB := db.Open(t, ""), db.Open(t, "")
	ctx := testCtx(t)

	l := mustLock(t, replicaA, "relay")
	var pid int
	if err := l.Conn().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var terminated bool
	if err := replicaB.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend = %v, %v", terminated, err)
	}

	if err := l.Alive(ctx); err == nil {
		t.Error("Alive reported no error after the session died")
	}
	mustLock(t, replicaB, "relay")
	l.Release()
	l.Release()
	// The broken connection was discarded, not returned.
	if err := replicaA.Ping(ctx); err != nil {
		t.Errorf("replica A's pool unusable after Release of a dead lock: %v", err)
	}
}

// TestAliveDetectsUnlockBehindItsBack covers a holder that unlocked through
// Conn by mistake: the session is fine, the lock is not.
func TestAliveDetectsUnlockBehindItsBack(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	ctx := testCtx(t)
	l := mustLock(t, pool, "relay")
	rows, err := l.Conn().Query(ctx, `SELECT pg_advisory_unlock_all()`)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := l.Alive(ctx); err == nil {
		t.Error("Alive reported no error for a lock no longer held")
	}
}

// TestLockKeysAreStable pins the key derivation: processes built from
// different versions of this package must agree on it.
func TestLockKeysAreStable(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	l := mustLock(t, pool, "relay")
	// pg_locks shows a bigint advisory key as classid (high 32 bits) and
	// objid (low 32 bits).
	var classid, objid int64
	if err := l.Conn().QueryRow(testCtx(t), `SELECT classid::bigint, objid::bigint FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&classid, &objid); err != nil {
		t.Fatal(err)
	}
	if got := uint64(classid)<<32 | uint64(objid); got != fnv64a("relay") {
		t.Errorf("lock key %#x, want FNV-64a %#x", got, fnv64a("relay"))
	}
}

// fnv64a is written out independently of hash/fnv so that a change of the
// derivation in the package is caught.
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
