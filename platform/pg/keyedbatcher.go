package pg

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// KeyedBatcher applies commands to keyed state (an aggregate's row) in
// set-based batches. Each batch is one transaction that
//
//  1. locks and loads the state of every key in the batch with one query
//     (KeyedStore.Lock, in key order so batches never deadlock),
//  2. runs the commands' decisions in arrival order on that state in
//     memory — a decision is pure, so one that fails changes nothing and
//     needs no rollback, and a key changed twice in a batch sees its first
//     change,
//  3. writes every change with one call (KeyedStore.Save), and commits.
//
// A batch of N commands thus costs a handful of statements instead of N
// times a handful, and they are pipelined: one round trip sends BEGIN and
// the lock query, one sends every write and COMMIT. That is what lets a
// small machine sustain thousands of commands per second, and keeps each
// command's latency low. Keys are sharded over workers, so two workers never
// hold locks on the same key. Only the batch's commands that decided
// successfully see a Save or commit error.
type KeyedBatcher[S, E any] struct {
	pool     *pgxpool.Pool
	store    KeyedStore[S, E]
	maxBatch int
	retry    func(error) bool
	after    func()
	keyed    bool
	queues   *workQueues[*keyedCmd[S, E]]
	wg       sync.WaitGroup
}

// KeyedStore describes how to load and save the state a KeyedBatcher works
// on, as statements the batcher pipelines.
type KeyedStore[S, E any] interface {
	// Lock returns the statement that loads the state of the keys that
	// exist, locked for the transaction (SELECT … FOR UPDATE in key order),
	// and how to read its rows (read must consume them).
	Lock(keys []string) (sql string, args []any, read func(pgx.Rows) (map[string]S, error))
	// Queue adds the statements that write the changes (each key at most
	// once, in first-change order) to b. mapErr turns the error of a failed
	// statement into what the commands see (e.g. a typed conflict).
	Queue(b *pgx.Batch, changes []KeyedChange[S, E]) (mapErr func(error) error, err error)
}

// KeyedChange is what a batch did to one key.
type KeyedChange[S, E any] struct {
	Key           string
	Found         bool // the key existed before the batch
	Before, After S
	Events        []E
}

// Decide is a command: from the key's current state (found = it exists)
// to its new state and the events that record the change. It must be pure.
// Returning no events leaves the key untouched.
type Decide[S, E any] func(s S, found bool) (after S, events []E, err error)

type keyedCmd[S, E any] struct {
	ctx    context.Context
	key    string
	decide Decide[S, E]
	done   chan keyedResult[S]
}

type keyedResult[S any] struct {
	state S
	err   error
}

// KeyedBatcherOptions configures a KeyedBatcher.
type KeyedBatcherOptions struct {
	Workers  int // default 2
	MaxBatch int // default 256
	// Retryable reports errors after which the whole batch is decided again
	// on freshly locked state (e.g. an optimistic-concurrency conflict with
	// another replica). At most three retries.
	Retryable func(error) bool
	// AfterCommit runs after every successful commit.
	AfterCommit func()
	// KeyedPlans says the store's statements are all keyed (QueueKeyedPlans):
	// each batch's transaction then runs them on their generic plans.
	KeyedPlans bool
}

// NewKeyedBatcher starts the workers; Close stops them.
func NewKeyedBatcher[S, E any](pool *pgxpool.Pool, store KeyedStore[S, E], o KeyedBatcherOptions) *KeyedBatcher[S, E] {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.Retryable == nil {
		o.Retryable = func(error) bool { return false }
	}
	b := &KeyedBatcher[S, E]{pool: pool, store: store, maxBatch: o.MaxBatch, retry: o.Retryable, after: o.AfterCommit, keyed: o.KeyedPlans,
		queues: newWorkQueues[*keyedCmd[S, E]](o.Workers, 4*o.MaxBatch)}
	for _, ch := range b.queues.chans {
		b.wg.Add(1)
		go b.work(ch)
	}
	return b
}

// Do runs decide on key's state in a batch and returns the state right
// after this command (or its error).
func (b *KeyedBatcher[S, E]) Do(ctx context.Context, key string, decide Decide[S, E]) (S, error) {
	c := &keyedCmd[S, E]{ctx: ctx, key: key, decide: decide, done: make(chan keyedResult[S], 1)}
	var zero S
	// Shard by key: every command of a key goes to one worker in the order
	// Do was called, so it is decided in arrival order, and two workers
	// never lock the same row (they would only queue on each other's row
	// locks).
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	if err := b.queues.send(ctx, int(h.Sum32()%uint32(len(b.queues.chans))), c); err != nil {
		return zero, err
	}
	// Once queued, the command is waited for even if ctx ends: it may
	// already be part of a transaction, and the caller must learn whether it
	// committed. A command whose ctx ended before its batch began is
	// answered with that error instead (run).
	r := <-c.done
	return r.state, r.err
}

// Close stops accepting commands, finishes the queued ones and waits.
func (b *KeyedBatcher[S, E]) Close() {
	// Do stops queueing; the workers finish what is queued (they range
	// over their closed queue) and exit.
	b.queues.close()
	b.wg.Wait()
}

func (b *KeyedBatcher[S, E]) work(ch chan *keyedCmd[S, E]) {
	defer b.wg.Done()
	serveBatches(ch, b.maxBatch, b.run)
}

func (b *KeyedBatcher[S, E]) run(batch []*keyedCmd[S, E]) {
	// Commands whose caller gave up before the batch began are answered with
	// their context's error and left out; once in a batch, a command shares
	// the batch's fate.
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- keyedResult[S]{err: err}
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	var (
		results []keyedResult[S]
		err     error
	)
	// A retryable error (another replica's write won a race on a key) means
	// some decisions were made on stale state, and which ones is not known:
	// decide the whole batch again on freshly locked state.
	for attempt := 0; ; attempt++ {
		results, err = b.attempt(live)
		if err == nil || !b.retry(err) || attempt == 3 {
			break
		}
	}
	// A batch error reaches only the commands that decided successfully; a
	// command whose own decision failed keeps its error, which no retry or
	// commit could change.
	for i, c := range live {
		r := results[i]
		if err != nil && r.err == nil {
			r = keyedResult[S]{err: err}
		}
		c.done <- r
	}
	// After every command was answered, so callers do not wait for the hook
	// (typically the outbox relay's Notify).
	if err == nil && b.after != nil {
		b.after()
	}
}

// attempt decides and saves the batch in one transaction. results holds
// each command's own outcome; err is the batch's (lock, save or commit).
func (b *KeyedBatcher[S, E]) attempt(cmds []*keyedCmd[S, E]) (results []keyedResult[S], err error) {
	results = make([]keyedResult[S], len(cmds))
	// Not any command's context: the transaction is shared, and one caller's
	// cancellation must not abort the others'. txTimeout bounds a stuck
	// database instead.
	ctx, cancel := context.WithTimeout(context.Background(), txTimeout)
	defer cancel()
	keys := make([]string, 0, len(cmds))
	for _, c := range cmds {
		keys = append(keys, c.key)
	}
	// Sorted and without duplicates: the lock query takes its row locks in
	// key order, so two batches that share keys (of this process or of
	// another replica) cannot deadlock.
	slices.Sort(keys)
	keys = slices.Compact(keys)
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return results, fmt.Errorf("pg: acquire: %w", err)
	}
	defer conn.Release()
	inTx := false
	defer func() {
		if err != nil && inTx {
			// A failed pipeline leaves the transaction open (aborted).
			rctx, rcancel := context.WithTimeout(context.Background(), rollbackTimeout)
			if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
				_ = conn.Conn().Close(rctx) // never hand back a connection in a transaction
			}
			rcancel()
		}
	}()

	sql, args, read := b.store.Lock(keys)
	// BEGIN and the lock query in one round trip.
	lock := &pgx.Batch{}
	lock.Queue("BEGIN")
	if b.keyed {
		QueueKeyedPlans(lock) // for the rest of the transaction
	}
	lock.Queue(sql, args...)
	// From here a failure must roll back (the deferred ROLLBACK): BEGIN may
	// have run even when reading its answer failed.
	inTx = true
	state, err := func() (map[string]S, error) {
		br := conn.SendBatch(ctx, lock)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("pg: begin: %w", err)
		}
		if b.keyed {
			if _, err := br.Exec(); err != nil {
				return nil, fmt.Errorf("pg: keyed plans: %w", err)
			}
		}
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		state, err := read(rows)
		if err != nil {
			return nil, err
		}
		return state, br.Close()
	}()
	if err != nil {
		return results, err
	}

	// Decide in arrival order on the state in memory. A failed decision
	// changes nothing (it is pure), so the others go on; a key decided more
	// than once sees its previous change, and its changes merge into one
	// KeyedChange with every event in order.
	changes := map[string]*KeyedChange[S, E]{}
	var order []string
	for i, c := range cmds {
		s, found := state[c.key]
		ch := changes[c.key]
		after, events, derr := decideSafely(c.decide, s, found)
		if derr != nil {
			results[i] = keyedResult[S]{state: s, err: derr}
			continue
		}
		results[i] = keyedResult[S]{state: after}
		if len(events) == 0 {
			continue
		}
		if ch == nil {
			ch = &KeyedChange[S, E]{Key: c.key, Found: found, Before: s}
			changes[c.key] = ch
			order = append(order, c.key)
		}
		ch.After = after
		ch.Events = append(ch.Events, events...)
		state[c.key] = after
	}
	write := &pgx.Batch{}
	mapErr := func(err error) error { return err }
	if len(order) > 0 {
		list := make([]KeyedChange[S, E], 0, len(order))
		for _, k := range order {
			list = append(list, *changes[k])
		}
		if mapErr, err = b.store.Queue(write, list); err != nil {
			return results, err
		}
	}
	// The writes and COMMIT in one more round trip. A batch that changed
	// nothing still commits, which releases its row locks.
	write.Queue("COMMIT")
	br := conn.SendBatch(ctx, write)
	n := write.Len()
	for i := 0; i < n; i++ {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			// The last statement is COMMIT: its failure is the batch's. An
			// earlier one is a write, whose error the store maps (e.g. to a
			// typed conflict the retry rule recognises).
			if i == n-1 {
				return results, fmt.Errorf("pg: commit: %w", err)
			}
			return results, mapErr(err)
		}
	}
	if err := br.Close(); err != nil {
		return results, fmt.Errorf("pg: commit: %w", err)
	}
	inTx = false
	return results, nil
}

// decideSafely turns a panicking decision into its own command's error,
// so the batch's other commands and every later batch go on.
func decideSafely[S, E any](d Decide[S, E], s S, found bool) (after S, events []E, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pg: decision panicked: %v", r)
		}
	}()
	return d(s, found)
}
