package pg

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// GroupCommitter runs commands submitted concurrently in shared
// transactions: application-level group commit. One COMMIT, one WAL flush
// and one round of BEGIN/COMMIT serve every command of a batch, which is
// what lets a small machine write more commands per second than it can
// commit transactions.
//
// Each command keeps its own all-or-nothing result. A batch runs its
// commands one after another in one transaction; when a command fails, the
// transaction is rolled back, that command gets its error, and the others
// run again in a fresh transaction. So a command must be a function of the
// transaction only: it may run more than once and must have no effect
// outside tx (publish, notify, spawn) before Do returns.
//
// Commands carry a key (typically the aggregate id). Commands with the same
// key always go to the same worker and run in submission order, so two
// workers never wait on each other's row locks for one aggregate. Batches
// form only from commands already waiting: a lone command runs at once, so
// batching adds no latency when the system is idle.
type GroupCommitter struct {
	pool        *pgxpool.Pool
	maxBatch    int
	afterCommit func()
	queues      *workQueues[*command]
	wg          sync.WaitGroup
}

// GroupCommitOptions configures a GroupCommitter.
type GroupCommitOptions struct {
	// Workers is how many transactions may run at once (default 2).
	Workers int
	// MaxBatch is the most commands per transaction (default 64).
	MaxBatch int
	// AfterCommit, if set, runs after every successful commit (e.g. to wake
	// the outbox relay).
	AfterCommit func()
}

type command struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx pgx.Tx) error
	done chan error
}

// ErrCommitterClosed is returned by Do after Close.
var ErrCommitterClosed = errors.New("pg: group committer closed")

// NewGroupCommitter starts the workers; Close stops them.
func NewGroupCommitter(pool *pgxpool.Pool, o GroupCommitOptions) *GroupCommitter {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	g := &GroupCommitter{pool: pool, maxBatch: o.MaxBatch, afterCommit: o.AfterCommit,
		queues: newWorkQueues[*command](o.Workers, 4*o.MaxBatch)}
	for _, ch := range g.queues.chans {
		g.wg.Add(1)
		go g.work(ch)
	}
	return g
}

// Do runs fn in a transaction shared with other commands and returns once
// that transaction committed (nil) or fn's or the commit's error.
func (g *GroupCommitter) Do(ctx context.Context, key string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	c := &command{ctx: ctx, fn: fn, done: make(chan error, 1)}
	// Blocks while the shard's queue is full: back-pressure on callers
	// rather than an unbounded queue in memory.
	if err := g.queues.send(ctx, g.shard(key), c); err != nil {
		return err
	}
	// Once queued the command will be answered: its context is checked
	// before it runs, and a command that started finishes with its
	// transaction.
	return <-c.done
}

func (g *GroupCommitter) shard(key string) int {
	// Same key, same worker: commands of one aggregate run in submission
	// order and never wait on each other's row locks from two transactions.
	if len(g.queues.chans) == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(g.queues.chans)))
}

// Close stops accepting commands, finishes the queued ones and waits.
func (g *GroupCommitter) Close() {
	// Do stops queueing; the workers finish what is queued (they range
	// over their closed queue) and exit.
	g.queues.close()
	g.wg.Wait()
}

func (g *GroupCommitter) work(ch chan *command) {
	defer g.wg.Done()
	serveBatches(ch, g.maxBatch, g.run)
}

// deadlockRetries bounds the reruns of a batch aborted by a deadlock or a
// serialization failure.
const deadlockRetries = 3

// txTimeout bounds BEGIN and COMMIT, which run on a context of their own:
// one caller giving up must not abort its batch-mates' commit.
const txTimeout = 30 * time.Second

func (g *GroupCommitter) run(batch []*command) {
	// A caller that gave up before its batch began is answered with its
	// context's error and not run.
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- err
			continue
		}
		live = append(live, c)
	}
	// Each failure removes one command and reruns the rest in a fresh
	// transaction, so a batch of n commands with f failures takes at most
	// f+1 transactions, and every command that is answered nil has
	// committed. A deadlock or serialization failure is no command's own:
	// the whole batch runs again (at most deadlockRetries times).
	retries := 0
	for len(live) > 0 {
		failed, err := g.attempt(live)
		if failed >= 0 && IsSerializationFailure(err) && retries < deadlockRetries {
			retries++
			continue
		}
		if failed < 0 {
			for _, c := range live {
				c.done <- err
			}
			// After the answers: callers do not wait for the hook.
			if err == nil && g.afterCommit != nil {
				g.afterCommit()
			}
			return
		}
		live[failed].done <- err
		live = append(live[:failed:failed], live[failed+1:]...)
	}
}

// attempt runs the commands in one transaction. It returns the index of
// the command that failed (and its error), or -1 with the result of the
// transaction as a whole.
func (g *GroupCommitter) attempt(cmds []*command) (failed int, err error) {
	// BEGIN and COMMIT on a context of their own (see txTimeout); each
	// command still runs on its caller's context.
	ctx, cancel := context.WithTimeout(context.Background(), txTimeout)
	defer cancel()
	tx, err := g.pool.Begin(ctx)
	if err != nil {
		return -1, fmt.Errorf("pg: begin: %w", err)
	}
	defer func() {
		if failed >= 0 || err != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), rollbackTimeout)
			_ = tx.Rollback(rctx)
			rcancel()
		}
	}()
	// Commands run one after another on one connection, in submission order:
	// a later command sees what an earlier one of the batch wrote.
	for i, c := range cmds {
		if ferr := runCommand(c, tx); ferr != nil {
			return i, ferr
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return -1, fmt.Errorf("pg: commit: %w", err)
	}
	return -1, nil
}

// runCommand turns a panic in fn into that command's error, so one bad
// command cannot take its batch-mates (or the worker) down.
func runCommand(c *command, tx pgx.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pg: command panicked: %v", r)
		}
	}()
	return c.fn(c.ctx, tx)
}
