// Package journal is the agent's durable record of every task it holds: a
// local_tasks table in SQLite (modernc.org/sqlite, pure Go; WAL mode with a
// busy timeout), one row per attempt, whose columns the local API shows as
// LocalTask (docs/api/agent-local.md#localtask). Why a journal at all:
// docs/decisions/0010-agent-sqlite-journal.md.
//
// Invariants the agent relies on:
//   - every state change is written here before the server is told, so a
//     restarted agent knows what it promised;
//   - a finished attempt stays with synced=0 until the server acknowledged or
//     rejected its outcome, and unsynced outcomes are delivered in order of
//     ended_at, also after an outage;
//   - an attempt finishes once: Finish only moves a row out of pending,
//     assigned or running, so a natural exit racing a stop records one
//     outcome.
//
// Rows are keyed by (id, attempt_id): the server may lease the same task to
// this agent again with a new attempt (a retry), and the old attempt's row
// must survive until its outcome is synced. Local tasks get an attempt id of
// their own. Times are stored as fixed-width UTC RFC 3339 text so that they
// sort as text.
package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
)

// Statuses of a row: the scheduler's task statuses (package lifecycle), as
// the strings the journal stores. A row is one attempt, so it uses the
// statuses an attempt passes through and ends in.
const (
	StatusPending   = string(lifecycle.StatusPending)
	StatusAssigned  = string(lifecycle.StatusAssigned)
	StatusRunning   = string(lifecycle.StatusRunning)
	StatusCompleted = string(lifecycle.StatusCompleted)
	StatusFailed    = string(lifecycle.StatusFailed)
	StatusCancelled = string(lifecycle.StatusCancelled)
	StatusPreempted = string(lifecycle.StatusPreempted)
)

// SQL lists of the statuses of attempts still going and of attempts that
// ended (see Final). They are built from the constants above, never from
// input.
var (
	activeIn = sqlStrings(StatusPending, StatusAssigned, StatusRunning)
	endedIn  = sqlStrings(StatusCompleted, StatusFailed, StatusCancelled, StatusPreempted)
)

func sqlStrings(values ...string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + v + "'"
	}
	return strings.Join(quoted, ",")
}

// Origins of a row.
const (
	OriginServer = "server" // claimed from the scheduler
	OriginLocal  = "local"  // created through the agent-local API
)

// ErrNotFound is returned by Get and Latest when no row matches.
var ErrNotFound = errors.New("journal: task not found")

// Task is one row of local_tasks.
type Task struct {
	ID      string
	Name    string
	Type    string
	Origin  string
	Command string
	Args    []string
	Workdir string
	Env     map[string]string
	// Timeout is in seconds (0: none).
	Timeout  int
	Priority int
	// Lease parameters the server gave (0: agent defaults).
	LeaseTTLSec      int
	RenewIntervalSec int
	GracePeriodSec   int

	Status          string
	AttemptID       string
	AssignedAgentID string
	LeaseExpiresAt  time.Time
	ExitCode        *int
	Stdout, Stderr  string
	// Bytes of each stream that were counted but not kept (output cap).
	StdoutTruncated, StderrTruncated int64
	Error                            string
	Progress                         int
	ProgressMessage                  string

	ReceivedAt      time.Time
	AssignedAt      time.Time
	StartedAt       time.Time
	EndedAt         time.Time
	LastHeartbeatAt time.Time

	// Synced: the outcome reached the server (or the server rejected it, or
	// the server itself decided the outcome; see LastSyncError).
	Synced        bool
	SyncAttempts  int
	LastSyncError string
	// ServerStarted: StartTask was acknowledged.
	ServerStarted bool

	// Process bookkeeping for reattaching after a restart.
	RunDir     string
	ShimSocket string
	ShimPID    int
	PID        int
	// StopReason says who stopped the process (timeout, cancelled, ...).
	StopReason string

	// ResultUpload: the output is too large to send inline and goes to the
	// object store; ResultKey and the rest are set once it is uploaded.
	ResultUpload bool
	ResultKey    string
	ResultSize   int64
	ResultSHA256 string

	// Video holds the parameters of a video task (taskv1.VideoParams as
	// protojson); empty for other types.
	Video string
	// Resources are the task's resources ("memory": "64Mi", "cpu": "500m",
	// "pids": "100", GPUs…), the agent's limits for it.
	Resources map[string]string

	// A local task's retries (the server decides a server task's):
	// MaxRetries attempts may follow a failed one, each RetryDelaySec
	// after the failure; RetryCount attempts came before this one, and a
	// retry waits in pending until RetryAt.
	MaxRetries, RetryDelaySec, RetryCount int
	RetryAt                               time.Time

	// OwnerFence, when not 0, is the fence a local task's creator asked
	// for (docs/api/agent-local.md, "Fenced local tasks"): the task runs
	// only while its creator keeps renewing it, and OwnerFenceGrace is
	// the SIGKILL grace after it passes. The deadline itself is the
	// agent's, in memory, and the shim's.
	OwnerFence, OwnerFenceGrace time.Duration
}

// OwnerFenced reports whether the task runs under its creator's fence.
func (t Task) OwnerFenced() bool { return t.OwnerFence > 0 }

// Final reports whether an attempt in status has ended: the task's final
// statuses, and preempted, which ends this agent's attempt (the scheduler
// requeues the task under a new attempt).
func Final(status string) bool {
	return lifecycle.Status(status).Final() || status == StatusPreempted
}

const schema = `
CREATE TABLE IF NOT EXISTS local_tasks (
    id                     TEXT NOT NULL,
    attempt_id             TEXT NOT NULL,
    name                   TEXT NOT NULL DEFAULT '',
    type                   TEXT NOT NULL DEFAULT 'shell',
    origin                 TEXT NOT NULL DEFAULT 'server',
    command                TEXT NOT NULL,
    args                   TEXT NOT NULL DEFAULT '[]',
    workdir                TEXT,
    env                    TEXT,
    timeout                INTEGER DEFAULT 3600,
    priority               INTEGER DEFAULT 5,
    lease_ttl_sec          INTEGER NOT NULL DEFAULT 0,
    renew_interval_sec     INTEGER NOT NULL DEFAULT 0,
    grace_period_sec       INTEGER NOT NULL DEFAULT 0,

    status                 TEXT DEFAULT 'pending',
    assigned_agent_id      TEXT,
    lease_expires_at       TEXT,
    exit_code              INTEGER,
    stdout                 TEXT,
    stderr                 TEXT,
    stdout_truncated_bytes INTEGER NOT NULL DEFAULT 0,
    stderr_truncated_bytes INTEGER NOT NULL DEFAULT 0,
    error                  TEXT,
    progress               INTEGER NOT NULL DEFAULT 0,
    progress_message       TEXT NOT NULL DEFAULT '',

    received_at            TEXT,
    assigned_at            TEXT,
    started_at             TEXT,
    ended_at               TEXT,
    last_heartbeat_at      TEXT,

    synced                 INTEGER DEFAULT 0,
    sync_attempts          INTEGER NOT NULL DEFAULT 0,
    last_sync_error        TEXT NOT NULL DEFAULT '',
    server_started         INTEGER NOT NULL DEFAULT 0,

    run_dir                TEXT NOT NULL DEFAULT '',
    shim_socket            TEXT NOT NULL DEFAULT '',
    shim_pid               INTEGER NOT NULL DEFAULT 0,
    pid                    INTEGER NOT NULL DEFAULT 0,
    stop_reason            TEXT NOT NULL DEFAULT '',

    result_upload          INTEGER NOT NULL DEFAULT 0,
    result_key             TEXT NOT NULL DEFAULT '',
    result_size            INTEGER NOT NULL DEFAULT 0,
    result_sha256          TEXT NOT NULL DEFAULT '',
    video                  TEXT NOT NULL DEFAULT '',
    resources              TEXT NOT NULL DEFAULT '{}',
    synced_at              TEXT,
    max_retries            INTEGER NOT NULL DEFAULT 0,
    retry_delay            INTEGER NOT NULL DEFAULT 0,
    retry_count            INTEGER NOT NULL DEFAULT 0,
    retry_at               TEXT,
    owner_fence_ms         INTEGER NOT NULL DEFAULT 0,
    owner_fence_grace_ms   INTEGER NOT NULL DEFAULT 0,

    PRIMARY KEY (id, attempt_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_local_tasks_attempt ON local_tasks(attempt_id);
CREATE INDEX IF NOT EXISTS idx_local_tasks_status ON local_tasks(status);
CREATE INDEX IF NOT EXISTS idx_local_tasks_priority ON local_tasks(priority);
CREATE INDEX IF NOT EXISTS idx_local_tasks_unsynced ON local_tasks(synced, ended_at);
`

// Journal is the SQLite-backed store. It is safe for concurrent use.
type Journal struct {
	// db writes, on one connection: SQLite serialises writers anyway, and
	// a single connection turns lock contention into Go-side queueing
	// instead of SQLITE_BUSY retries.
	db *handle
	// reads reads rows, on connections of its own: in WAL mode readers
	// neither wait for the writer nor hold it up, and every read begins
	// after the writes committed before it. A busy agent is asked for its
	// tasks all the time (a Slurm backend asks for each of its attempts
	// once a second), and those reads queued behind the writes of starts
	// and ends on the one connection.
	reads *handle

	// mu guards busy (a group of writes is running) and queue (the
	// writes waiting for it): execStmt.
	mu    sync.Mutex
	busy  bool
	queue []*write
}

// readConns bounds the reading connections.
const readConns = 4

// handle is a database handle with the statements prepared on it so far,
// by their text. SQLite parses and plans a statement at preparation,
// which took about half of the journal's CPU per task when every call
// prepared afresh (BenchmarkAttemptLife); the statements are few and
// fixed, so each is prepared once per connection.
type handle struct {
	*sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// maxStmts bounds the prepared statements kept; a statement beyond it is
// prepared for each call, as before. The journal's fixed statements are
// fewer; only lists by a set of statuses vary, and few sets are used.
const maxStmts = 64

// stmt returns q prepared, from the cache when it is there. A statement
// that could not be kept is closed by done after its use.
func (h *handle) stmt(ctx context.Context, q string) (st *sql.Stmt, done func(), err error) {
	h.mu.Lock()
	st = h.stmts[q]
	h.mu.Unlock()
	if st != nil {
		return st, func() {}, nil
	}
	if st, err = h.PrepareContext(ctx, q); err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if kept := h.stmts[q]; kept != nil {
		// Prepared meanwhile by another call: use the one kept.
		_ = st.Close()
		return kept, func() {}, nil
	}
	if len(h.stmts) >= maxStmts {
		return st, func() { _ = st.Close() }, nil
	}
	h.stmts[q] = st
	return st, func() {}, nil
}

func (h *handle) close() error {
	h.mu.Lock()
	for q, st := range h.stmts {
		_ = st.Close()
		delete(h.stmts, q)
	}
	h.mu.Unlock()
	return h.DB.Close()
}

// execStmt runs q on the writing connection, prepared once (stmt), and
// returns once it is committed. The single-row updates of concurrent
// attempts share commits: a write that finds another running waits, and
// the writes that waited meanwhile run next, together, in one transaction
// (the first of them leads it). In WAL mode a commit appends every page
// the transaction changed to the log, and concurrent attempts' updates
// change mostly the same few pages (the table's and its indexes'): a
// shared commit writes them once (BenchmarkAttemptLifeParallel). A write
// that finds none running runs at once, on its own. A statement that
// fails inside a shared transaction is undone alone (SQLite's statement
// rollback) and gets its error; a commit that fails gives its error to
// every write of the group. Each caller's writes stay in its order: it
// waits for one before it makes the next.
func (j *Journal) execStmt(ctx context.Context, q string, args ...any) (sql.Result, error) {
	w := &write{ctx: ctx, q: q, args: args, done: make(chan struct{})}
	j.mu.Lock()
	if j.busy {
		j.queue = append(j.queue, w)
		j.mu.Unlock()
		<-w.done
		if !w.lead {
			return w.res, w.err
		}
		j.mu.Lock()
	}
	j.busy = true
	n := min(len(j.queue), maxGroup-1)
	group := append([]*write{w}, j.queue[:n]...)
	j.queue = j.queue[n:]
	j.mu.Unlock()

	j.commit(group)

	j.mu.Lock()
	if len(j.queue) > 0 {
		next := j.queue[0]
		j.queue = j.queue[1:]
		next.lead = true
		close(next.done)
	} else {
		j.busy = false
	}
	j.mu.Unlock()
	for _, o := range group[1:] {
		close(o.done)
	}
	return w.res, w.err
}

// write is one statement for execStmt.
type write struct {
	ctx  context.Context
	q    string
	args []any
	res  sql.Result
	err  error
	// lead is set when the write is woken to run the next group.
	lead bool
	done chan struct{}
}

// maxGroup bounds the writes of one shared commit.
const maxGroup = 64

// commit runs a group of writes: one alone as it is, several in one
// transaction. The statements are prepared before the transaction
// begins: the journal has one writing connection, which the transaction
// holds until it ends.
func (j *Journal) commit(group []*write) {
	if len(group) == 1 {
		w := group[0]
		w.res, w.err = j.execPrepared(w, nil, nil)
		return
	}
	stmts := make([]*sql.Stmt, len(group))
	for i, w := range group {
		st, done, err := j.db.stmt(w.ctx, w.q)
		if err != nil {
			w.err = err
			continue
		}
		defer done()
		stmts[i] = st
	}
	tx, err := j.db.BeginTx(context.Background(), nil)
	if err != nil {
		for _, w := range group {
			w.err = errors.Join(w.err, err)
		}
		return
	}
	for i, w := range group {
		if stmts[i] != nil {
			w.res, w.err = j.execPrepared(w, tx, stmts[i])
		}
	}
	if err := tx.Commit(); err != nil {
		for _, w := range group {
			w.res, w.err = nil, errors.Join(w.err, err)
		}
	}
}

// execPrepared runs w's statement: st in tx, or on its own (prepared
// once) when tx is nil.
func (j *Journal) execPrepared(w *write, tx *sql.Tx, st *sql.Stmt) (sql.Result, error) {
	if tx != nil {
		// A cancelled context interrupts SQLite, and an interrupted
		// write inside a transaction rolls the whole transaction back:
		// the group's other writes must not depend on this caller's.
		ctx := context.WithoutCancel(w.ctx)
		return tx.StmtContext(ctx, st).ExecContext(ctx, w.args...)
	}
	st, done, err := j.db.stmt(w.ctx, w.q)
	if err != nil {
		return nil, err
	}
	defer done()
	return st.ExecContext(w.ctx, w.args...)
}

// Open opens (creating if needed) the journal at path.
func Open(ctx context.Context, path string) (*Journal, error) {
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // see Journal.db
	if _, err := db.ExecContext(ctx, schema+filesSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create journal schema: %w", err)
	}
	if err := addMissingColumns(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	// The journal holds tasks' environments and outputs: the agent's
	// alone. SQLite gives its WAL and shared-memory files the database
	// file's mode.
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(f, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			db.Close()
			return nil, fmt.Errorf("journal %s: %w", f, err)
		}
	}
	// Opened once the schema exists and the file is in WAL mode (a
	// setting the file keeps).
	rdb, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(readConns)
	rdb.SetMaxIdleConns(readConns)
	return &Journal{db: &handle{DB: db, stmts: map[string]*sql.Stmt{}},
		reads: &handle{DB: rdb, stmts: map[string]*sql.Stmt{}}}, nil
}

// addedColumns are columns later versions added to local_tasks: a journal
// written by an older agent gets them on open, so its unsynced outcomes
// survive the upgrade.
var addedColumns = []struct{ name, ddl string }{
	{"video", `ALTER TABLE local_tasks ADD COLUMN video TEXT NOT NULL DEFAULT ''`},
	{"resources", `ALTER TABLE local_tasks ADD COLUMN resources TEXT NOT NULL DEFAULT '{}'`},
	{"synced_at", `ALTER TABLE local_tasks ADD COLUMN synced_at TEXT`},
	{"max_retries", `ALTER TABLE local_tasks ADD COLUMN max_retries INTEGER NOT NULL DEFAULT 0`},
	{"retry_delay", `ALTER TABLE local_tasks ADD COLUMN retry_delay INTEGER NOT NULL DEFAULT 0`},
	{"retry_count", `ALTER TABLE local_tasks ADD COLUMN retry_count INTEGER NOT NULL DEFAULT 0`},
	{"retry_at", `ALTER TABLE local_tasks ADD COLUMN retry_at TEXT`},
	{"owner_fence_ms", `ALTER TABLE local_tasks ADD COLUMN owner_fence_ms INTEGER NOT NULL DEFAULT 0`},
	{"owner_fence_grace_ms", `ALTER TABLE local_tasks ADD COLUMN owner_fence_grace_ms INTEGER NOT NULL DEFAULT 0`},
}

func addMissingColumns(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info('local_tasks')`)
	if err != nil {
		return fmt.Errorf("journal columns: %w", err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("journal columns: %w", err)
		}
		have[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("journal columns: %w", err)
	}
	for _, c := range addedColumns {
		if have[c.name] {
			continue
		}
		if _, err := db.ExecContext(ctx, c.ddl); err != nil {
			return fmt.Errorf("journal: add column %s: %w", c.name, err)
		}
	}
	return nil
}

// Close closes the database.
func (j *Journal) Close() error {
	return errors.Join(j.reads.close(), j.db.close())
}

const timeLayout = "2006-01-02T15:04:05.000000000Z"

func fmtTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s sql.NullString) time.Time {
	if !s.Valid || s.String == "" {
		return time.Time{}
	}
	t, err := time.Parse(timeLayout, s.String)
	if err != nil {
		t, _ = time.Parse(time.RFC3339Nano, s.String)
	}
	return t
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Insert stores new rows in one transaction and reports, per row, whether
// it was new: an attempt already journaled (a replayed claim) is left as it
// is, so the caller never starts it twice.
func (j *Journal) Insert(ctx context.Context, ts ...Task) ([]bool, error) {
	// Prepared before the transaction begins: the journal has one
	// connection, which the transaction holds until it ends.
	ins, done, err := j.db.stmt(ctx, insertTask)
	if err != nil {
		return nil, fmt.Errorf("insert tasks: %w", err)
	}
	defer done()
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("insert tasks: %w", err)
	}
	defer tx.Rollback()
	ins = tx.StmtContext(ctx, ins)
	created := make([]bool, len(ts))
	for i, t := range ts {
		args, _ := json.Marshal(nonNil(t.Args))
		env, _ := json.Marshal(t.Env)
		resources := []byte("{}")
		if len(t.Resources) > 0 {
			resources, _ = json.Marshal(t.Resources)
		}
		res, err := ins.ExecContext(ctx, t.ID, t.AttemptID, t.Name, t.Type, t.Origin, t.Command, string(args), t.Workdir, string(env),
			t.Timeout, t.Priority, t.LeaseTTLSec, t.RenewIntervalSec, t.GracePeriodSec,
			t.Status, t.AssignedAgentID, fmtTime(t.LeaseExpiresAt), fmtTime(t.ReceivedAt), fmtTime(t.AssignedAt), b2i(t.Synced), t.Video,
			string(resources), t.MaxRetries, t.RetryDelaySec, t.RetryCount, fmtTime(t.RetryAt),
			t.OwnerFence.Milliseconds(), t.OwnerFenceGrace.Milliseconds())
		if err != nil {
			return nil, fmt.Errorf("insert task %s: %w", t.ID, err)
		}
		n, _ := res.RowsAffected()
		created[i] = n == 1
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("insert tasks: %w", err)
	}
	return created, nil
}

const insertTask = `
INSERT INTO local_tasks (id, attempt_id, name, type, origin, command, args, workdir, env,
    timeout, priority, lease_ttl_sec, renew_interval_sec, grace_period_sec,
    status, assigned_agent_id, lease_expires_at, received_at, assigned_at, synced, video, resources,
    max_retries, retry_delay, retry_count, retry_at, owner_fence_ms, owner_fence_grace_ms)
VALUES (?,?,?,?,?,?,?,?,?, ?,?,?,?,?, ?,?,?,?,?,?,?,?, ?,?,?,?, ?,?)
ON CONFLICT DO NOTHING`

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

const columns = `id, attempt_id, name, type, origin, command, args, workdir, env,
    timeout, priority, lease_ttl_sec, renew_interval_sec, grace_period_sec,
    status, assigned_agent_id, lease_expires_at, exit_code, stdout, stderr,
    stdout_truncated_bytes, stderr_truncated_bytes, error, progress, progress_message,
    received_at, assigned_at, started_at, ended_at, last_heartbeat_at,
    synced, sync_attempts, last_sync_error, server_started,
    run_dir, shim_socket, shim_pid, pid, stop_reason,
    result_upload, result_key, result_size, result_sha256, video, resources,
    max_retries, retry_delay, retry_count, retry_at, owner_fence_ms, owner_fence_grace_ms`

type scanner interface{ Scan(dest ...any) error }

func scanTask(s scanner) (Task, error) {
	var (
		t                                         Task
		args, env, workdir, agent, resources      sql.NullString
		stdout, stderr, errText                   sql.NullString
		lease, recv, assigned, started, ended, hb sql.NullString
		retryAt                                   sql.NullString
		exit                                      sql.NullInt64
		timeout, priority, synced                 sql.NullInt64
		serverStarted, upload                     int
		ownerFence, ownerFenceGrace               int64
	)
	err := s.Scan(&t.ID, &t.AttemptID, &t.Name, &t.Type, &t.Origin, &t.Command, &args, &workdir, &env,
		&timeout, &priority, &t.LeaseTTLSec, &t.RenewIntervalSec, &t.GracePeriodSec,
		&t.Status, &agent, &lease, &exit, &stdout, &stderr,
		&t.StdoutTruncated, &t.StderrTruncated, &errText, &t.Progress, &t.ProgressMessage,
		&recv, &assigned, &started, &ended, &hb,
		&synced, &t.SyncAttempts, &t.LastSyncError, &serverStarted,
		&t.RunDir, &t.ShimSocket, &t.ShimPID, &t.PID, &t.StopReason,
		&upload, &t.ResultKey, &t.ResultSize, &t.ResultSHA256, &t.Video, &resources,
		&t.MaxRetries, &t.RetryDelaySec, &t.RetryCount, &retryAt, &ownerFence, &ownerFenceGrace)
	if err != nil {
		return Task{}, err
	}
	t.OwnerFence, t.OwnerFenceGrace = time.Duration(ownerFence)*time.Millisecond, time.Duration(ownerFenceGrace)*time.Millisecond
	if args.Valid && args.String != "" {
		_ = json.Unmarshal([]byte(args.String), &t.Args)
	}
	if env.Valid && env.String != "" && env.String != "null" {
		_ = json.Unmarshal([]byte(env.String), &t.Env)
	}
	if resources.Valid && resources.String != "" && resources.String != "{}" {
		_ = json.Unmarshal([]byte(resources.String), &t.Resources)
	}
	t.Workdir, t.AssignedAgentID = workdir.String, agent.String
	t.Stdout, t.Stderr, t.Error = stdout.String, stderr.String, errText.String
	t.Timeout, t.Priority = int(timeout.Int64), int(priority.Int64)
	if exit.Valid {
		c := int(exit.Int64)
		t.ExitCode = &c
	}
	t.LeaseExpiresAt = parseTime(lease)
	t.ReceivedAt, t.AssignedAt = parseTime(recv), parseTime(assigned)
	t.StartedAt, t.EndedAt, t.LastHeartbeatAt = parseTime(started), parseTime(ended), parseTime(hb)
	t.Synced = synced.Int64 != 0
	t.ServerStarted = serverStarted != 0
	t.ResultUpload = upload != 0
	t.RetryAt = parseTime(retryAt)
	return t, nil
}

func (j *Journal) query(ctx context.Context, q string, args ...any) ([]Task, error) {
	st, done, err := j.reads.stmt(ctx, `SELECT `+columns+` FROM local_tasks `+q)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Get returns the row of one attempt.
func (j *Journal) Get(ctx context.Context, attemptID string) (Task, error) {
	ts, err := j.query(ctx, `WHERE attempt_id = ?`, attemptID)
	if err != nil {
		return Task{}, fmt.Errorf("get attempt %s: %w", attemptID, err)
	}
	if len(ts) == 0 {
		return Task{}, ErrNotFound
	}
	return ts[0], nil
}

// Latest returns the newest attempt of a task.
func (j *Journal) Latest(ctx context.Context, taskID string) (Task, error) {
	ts, err := j.query(ctx, `WHERE id = ? ORDER BY received_at DESC, rowid DESC LIMIT 1`, taskID)
	if err != nil {
		return Task{}, fmt.Errorf("get task %s: %w", taskID, err)
	}
	if len(ts) == 0 {
		return Task{}, ErrNotFound
	}
	return ts[0], nil
}

// List returns rows newest first, optionally of one status; limit <= 0
// means 100.
func (j *Journal) List(ctx context.Context, status string, limit int) ([]Task, error) {
	if limit <= 0 {
		limit = 100
	}
	var (
		ts  []Task
		err error
	)
	if status == "" {
		ts, err = j.query(ctx, `ORDER BY received_at DESC, rowid DESC LIMIT ?`, limit)
	} else {
		ts, err = j.query(ctx, `WHERE status = ? ORDER BY received_at DESC, rowid DESC LIMIT ?`, status, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return ts, nil
}

// WithStatus returns the rows in any of the statuses, by priority (1 is
// highest) then arrival: the order the local queue runs them in.
func (j *Journal) WithStatus(ctx context.Context, statuses ...string) ([]Task, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	ph := strings.TrimSuffix(strings.Repeat("?,", len(statuses)), ",")
	args := make([]any, len(statuses))
	for i, s := range statuses {
		args[i] = s
	}
	ts, err := j.query(ctx, `WHERE status IN (`+ph+`) ORDER BY priority, received_at, rowid`, args...)
	if err != nil {
		return nil, fmt.Errorf("tasks with status %v: %w", statuses, err)
	}
	return ts, nil
}

// Unsynced returns finished attempts whose outcome the server has not
// acknowledged, oldest end first: the order their deliveries start in.
func (j *Journal) Unsynced(ctx context.Context, limit int) ([]Task, error) {
	if limit <= 0 {
		limit = 100
	}
	ts, err := j.query(ctx, `WHERE synced = 0 AND status IN (`+endedIn+`)
ORDER BY ended_at, rowid LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("unsynced tasks: %w", err)
	}
	return ts, nil
}

// Counts summarises the journal for the queue status.
type Counts struct {
	Pending, Assigned, Running, Unsynced int
}

// Count returns the Counts.
func (j *Journal) Count(ctx context.Context) (Counts, error) {
	var c Counts
	err := j.db.QueryRowContext(ctx, `SELECT
    COALESCE(SUM(status = '`+StatusPending+`'), 0),
    COALESCE(SUM(status = '`+StatusAssigned+`'), 0),
    COALESCE(SUM(status = '`+StatusRunning+`'), 0),
    COALESCE(SUM(synced = 0 AND status IN (`+endedIn+`)), 0)
FROM local_tasks`).Scan(&c.Pending, &c.Assigned, &c.Running, &c.Unsynced)
	if err != nil {
		return Counts{}, fmt.Errorf("count tasks: %w", err)
	}
	return c, nil
}

// exec runs an update of one attempt and reports whether a row changed.
func (j *Journal) exec(ctx context.Context, what, q string, args ...any) (bool, error) {
	res, err := j.execStmt(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// MarkRunning records that the attempt is about to start (before StartTask
// is sent): a restart that finds it running without a process knows the
// process was lost. A local task was assigned to this agent when it left
// the queue, now, as a server task was when it was claimed.
func (j *Journal) MarkRunning(ctx context.Context, attemptID string, at time.Time) (bool, error) {
	return j.exec(ctx, "mark running "+attemptID, `UPDATE local_tasks
SET status = '`+StatusRunning+`', started_at = COALESCE(started_at, ?), assigned_at = COALESCE(assigned_at, ?)
WHERE attempt_id = ? AND status IN (`+activeIn+`)`, fmtTime(at), fmtTime(at), attemptID)
}

// SetServerStarted records that StartTask was acknowledged, with the
// lease its answer gave (expires, at now; a zero expires leaves the lease
// as it was): one write for one answer.
func (j *Journal) SetServerStarted(ctx context.Context, attemptID string, expires, now time.Time) error {
	if expires.IsZero() {
		_, err := j.exec(ctx, "set server started "+attemptID,
			`UPDATE local_tasks SET server_started = 1 WHERE attempt_id = ?`, attemptID)
		return err
	}
	_, err := j.exec(ctx, "set server started "+attemptID, `UPDATE local_tasks
SET server_started = 1, lease_expires_at = ?, last_heartbeat_at = ? WHERE attempt_id = ?`,
		fmtTime(expires), fmtTime(now), attemptID)
	return err
}

// SetProcess records where the attempt's shim and process are.
func (j *Journal) SetProcess(ctx context.Context, attemptID, runDir, socket string, shimPID, pid int) error {
	_, err := j.exec(ctx, "set process "+attemptID, `UPDATE local_tasks
SET run_dir = ?, shim_socket = ?, shim_pid = ?, pid = ? WHERE attempt_id = ?`,
		runDir, socket, shimPID, pid, attemptID)
	return err
}

// SetLease records a renewed lease.
func (j *Journal) SetLease(ctx context.Context, attemptID string, expires, at time.Time) error {
	_, err := j.exec(ctx, "set lease "+attemptID, `UPDATE local_tasks
SET lease_expires_at = ?, last_heartbeat_at = ? WHERE attempt_id = ?`,
		fmtTime(expires), fmtTime(at), attemptID)
	return err
}

// SetProgress records the latest progress.
func (j *Journal) SetProgress(ctx context.Context, attemptID string, progress int, msg string, at time.Time) error {
	_, err := j.exec(ctx, "set progress "+attemptID, `UPDATE local_tasks
SET progress = ?, progress_message = ?, last_heartbeat_at = ? WHERE attempt_id = ?`,
		progress, msg, fmtTime(at), attemptID)
	return err
}

// Outcome is how an attempt ended.
type Outcome struct {
	Status                           string
	ExitCode                         *int
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated int64
	Error                            string
	StartedAt                        time.Time
	EndedAt                          time.Time
	StopReason                       string
	// Upload: the output goes to the object store (see Task.ResultUpload).
	Upload bool
	// Synced is set when there is nothing to tell the server (local tasks,
	// or outcomes the server itself decided); Note says why.
	Synced bool
	Note   string
	// SyncedAt is when, with Synced (default EndedAt): delivered rows are
	// pruned some time after it (Prune).
	SyncedAt time.Time
}

// Finish records the outcome unless the attempt already ended; it reports
// whether it did.
func (j *Journal) Finish(ctx context.Context, attemptID string, o Outcome) (bool, error) {
	var exit any
	if o.ExitCode != nil {
		exit = *o.ExitCode
	}
	var syncedAt any
	if o.Synced {
		syncedAt = fmtTime(o.EndedAt)
		if !o.SyncedAt.IsZero() {
			syncedAt = fmtTime(o.SyncedAt)
		}
	}
	return j.exec(ctx, "finish "+attemptID, `UPDATE local_tasks
SET status = ?, exit_code = ?, stdout = ?, stderr = ?, stdout_truncated_bytes = ?,
    stderr_truncated_bytes = ?, error = ?, started_at = COALESCE(started_at, ?), ended_at = ?,
    stop_reason = ?, synced = ?, last_sync_error = ?, result_upload = ?, synced_at = ?,
    progress = CASE WHEN ? = '`+StatusCompleted+`' THEN 100 ELSE progress END
WHERE attempt_id = ? AND status IN (`+activeIn+`)`,
		o.Status, exit, o.Stdout, o.Stderr, o.StdoutTruncated, o.StderrTruncated, o.Error,
		fmtTime(o.StartedAt), fmtTime(o.EndedAt), o.StopReason, b2i(o.Synced), o.Note, b2i(o.Upload), syncedAt,
		o.Status, attemptID)
}

// SetResultObject records an uploaded result, so a retried delivery does
// not upload it again.
func (j *Journal) SetResultObject(ctx context.Context, attemptID, key string, size int64, sha string) error {
	_, err := j.exec(ctx, "set result object "+attemptID, `UPDATE local_tasks
SET result_key = ?, result_size = ?, result_sha256 = ? WHERE attempt_id = ?`, key, size, sha, attemptID)
	return err
}

// MarkSynced records that the server has the outcome (note empty) or
// refused it for good (note says why).
func (j *Journal) MarkSynced(ctx context.Context, attemptID, note string, at time.Time) error {
	_, err := j.exec(ctx, "mark synced "+attemptID, `UPDATE local_tasks
SET synced = 1, sync_attempts = sync_attempts + 1, last_sync_error = ?, synced_at = ? WHERE attempt_id = ?`, note, fmtTime(at), attemptID)
	return err
}

// RecordSyncFailure counts a failed delivery.
func (j *Journal) RecordSyncFailure(ctx context.Context, attemptID, errText string) error {
	_, err := j.exec(ctx, "record sync failure "+attemptID, `UPDATE local_tasks
SET sync_attempts = sync_attempts + 1, last_sync_error = ? WHERE attempt_id = ?`, errText, attemptID)
	return err
}

// Prune deletes the rows of ended attempts whose outcome reached the
// server (synced) before cutoff, with what they kept (attempt_files):
// what the journal must keep is what the agent still owes or runs; the
// rest is history for the local API, kept for a while. It returns how
// many attempts it deleted.
//
// An attempt's files are journaled before its row (claim.go), so they are
// deleted by the rows pruned, never as rows without an attempt: that
// would take the files of an attempt being claimed.
func (j *Journal) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	defer tx.Rollback()
	pruned := `synced = 1 AND status IN (` + endedIn + `) AND COALESCE(synced_at, ended_at) < ?`
	if _, err := tx.ExecContext(ctx, `DELETE FROM attempt_files
WHERE attempt_id IN (SELECT attempt_id FROM local_tasks WHERE `+pruned+`)`, fmtTime(cutoff)); err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM local_tasks WHERE `+pruned, fmtTime(cutoff))
	if err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	return n, nil
}

// Held returns the attempts (and their tasks) whose files must stay: those
// still going and those whose outcome has not reached the server yet.
func (j *Journal) Held(ctx context.Context) (attempts, tasks map[string]bool, err error) {
	rows, err := j.db.QueryContext(ctx, `SELECT attempt_id, id FROM local_tasks WHERE synced = 0 OR status IN (`+activeIn+`)`)
	if err != nil {
		return nil, nil, fmt.Errorf("held attempts: %w", err)
	}
	defer rows.Close()
	attempts, tasks = map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var a, t string
		if err := rows.Scan(&a, &t); err != nil {
			return nil, nil, fmt.Errorf("held attempts: %w", err)
		}
		attempts[a], tasks[t] = true, true
	}
	return attempts, tasks, rows.Err()
}
