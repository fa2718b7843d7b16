package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PipelinedTx is a transaction on one connection whose BEGIN goes out with
// its first batch, and whose COMMIT goes out with its last batch when the
// caller arms it (CommitWithNextBatch). A transaction that reads in one
// batch and writes in another then costs two round trips instead of four.
// Under load each round trip waits for a CPU twice (the backend's turn,
// then the caller's), so on a hot path such as the admission loop's cycle
// the trips saved are latency saved (docs/decisions/0055-direct-admission-of-new-tasks.md).
//
// Statements sent one by one (Exec, Query, QueryRow, CopyFrom, Prepare)
// work as on any transaction; the first of them sends BEGIN on its own.
// Nested transactions (Begin) are not supported. Use it through
// InPipelinedTx, which commits or rolls back as InTx does.
type PipelinedTx struct {
	conn *pgx.Conn
	// begun: BEGIN has been sent. commitNext: the next batch carries
	// COMMIT. fused: a batch carried COMMIT; commitErr is its outcome once
	// the batch was closed (closed).
	begun, commitNext, fused, closed bool
	commitErr                        error
}

var _ pgx.Tx = (*PipelinedTx)(nil)

// errNested is Begin's answer: a pipelined transaction has no savepoints.
var errNested = errors.New("pg: a pipelined transaction does not nest")

// InPipelinedTx runs fn in a PipelinedTx on conn; commit if fn returns
// nil (unless fn's last batch carried COMMIT), rollback otherwise. Errors
// are reported as InTx reports them.
func InPipelinedTx(ctx context.Context, conn *pgx.Conn, fn func(*PipelinedTx) error) error {
	tx := &PipelinedTx{conn: conn}
	if err := fn(tx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
		return fmt.Errorf("pg: commit: %w", err)
	}
	return nil
}

// CommitWithNextBatch makes the next SendBatch end with COMMIT. Its
// outcome is the batch's: an error of any statement, COMMIT's included,
// is returned by the batch results (Close at the latest), and the
// transaction is then rolled back by InPipelinedTx.
func (t *PipelinedTx) CommitWithNextBatch() { t.commitNext = true }

// SendBatch sends b, after BEGIN when nothing was sent yet and followed
// by COMMIT when armed. The results are b's own: BEGIN's is read here.
func (t *PipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.begun && !t.commitNext {
		return t.conn.SendBatch(ctx, b)
	}
	sent := &pgx.Batch{}
	begin := !t.begun
	if begin {
		sent.Queue("BEGIN")
	}
	sent.QueuedQueries = append(sent.QueuedQueries, b.QueuedQueries...)
	commit := t.commitNext
	if commit {
		sent.Queue("COMMIT")
		t.commitNext, t.fused = false, true
	}
	t.begun = true
	br := t.conn.SendBatch(ctx, sent)
	if begin {
		if _, err := br.Exec(); err != nil {
			return &pipelinedResults{BatchResults: br, tx: t, commit: commit, err: fmt.Errorf("pg: begin: %w", err)}
		}
	}
	return &pipelinedResults{BatchResults: br, tx: t, commit: commit}
}

// pipelinedResults are a batch's results; Close records the outcome of a
// COMMIT the batch carried.
type pipelinedResults struct {
	pgx.BatchResults
	tx     *PipelinedTx
	commit bool
	// err: BEGIN failed; every result is that error.
	err error
}

func (r *pipelinedResults) Exec() (pgconn.CommandTag, error) {
	if r.err != nil {
		return pgconn.CommandTag{}, r.err
	}
	return r.BatchResults.Exec()
}

func (r *pipelinedResults) Query() (pgx.Rows, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.BatchResults.Query()
}

func (r *pipelinedResults) QueryRow() pgx.Row {
	if r.err != nil {
		return errRow{r.err}
	}
	return r.BatchResults.QueryRow()
}

func (r *pipelinedResults) Close() error {
	err := r.BatchResults.Close()
	if r.err != nil {
		err = r.err
	}
	if r.commit && !r.tx.closed {
		r.tx.closed, r.tx.commitErr = true, err
		if err == nil {
			return nil
		}
		// A failed statement skips the rest of the pipeline, COMMIT
		// included: the transaction is open and aborted, not committed.
		r.tx.commitErr = fmt.Errorf("pg: transaction not committed: %w", err)
	}
	return err
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

// begin sends BEGIN on its own before a statement sent outside a batch.
func (t *PipelinedTx) begin(ctx context.Context) error {
	if t.begun {
		return nil
	}
	if _, err := t.conn.Exec(ctx, "BEGIN"); err != nil {
		return fmt.Errorf("pg: begin: %w", err)
	}
	t.begun = true
	return nil
}

// Commit commits, unless a batch carried COMMIT already (then it returns
// that batch's outcome). Nothing sent: nothing to commit.
func (t *PipelinedTx) Commit(ctx context.Context) error {
	switch {
	case t.fused && !t.closed:
		return errors.New("pg: the batch carrying COMMIT was not closed")
	case t.fused:
		return t.commitErr
	case !t.begun:
		return nil
	}
	_, err := t.conn.Exec(ctx, "COMMIT")
	t.fused, t.closed, t.commitErr = true, true, err
	return err
}

// Rollback rolls back what is not committed; after a commit it does
// nothing.
func (t *PipelinedTx) Rollback(ctx context.Context) error {
	if !t.begun || (t.fused && t.closed && t.commitErr == nil) {
		return nil
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	t.begun = false
	return err
}

// Begin is not supported: a pipelined transaction does not nest.
func (t *PipelinedTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNested }

func (t *PipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

func (t *PipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *PipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.begin(ctx); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *PipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

func (t *PipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects are not supported in a pipelined transaction: the zero
// value, whose calls fail.
func (t *PipelinedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *PipelinedTx) Conn() *pgx.Conn { return t.conn }
