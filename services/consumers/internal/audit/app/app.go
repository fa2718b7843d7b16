// Package app holds the audit log's use cases: listing entries for a
// caller (ListAuditLogs) and the retention that archives expired entries
// and deletes them (Expire, RunRetention). It depends only on the
// interfaces it declares (Store, Expirer, Archive); the consumers service
// wires the Postgres and object-store adapters in.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

// Store reads the audit log.
type Store interface {
	// List returns up to q.PageSize+1 entries q selects in the listing
	// order (domain.Cursor: timestamp, version, id, all descending), after
	// q.After when set.
	List(ctx context.Context, q domain.Query) ([]domain.Entry, error)
}

// Expirer removes expired entries.
type Expirer interface {
	// Expire, in one transaction: records cutoff as the archive mark (from
	// then on the projection writes no entry older than it), takes up to n
	// entries older than cutoff, oldest first, hands them to archive and,
	// if archive returns nil, deletes them. It returns how many entries it
	// deleted: 0 once none is older than cutoff. An error from archive
	// rolls everything back.
	Expire(ctx context.Context, cutoff time.Time, n int, archive func(context.Context, []domain.Entry) error) (int, error)
}

// Archive keeps expired entries in the object store.
type Archive interface {
	// Put writes entries as JSON Lines (one AuditLog object per line, the
	// API's field names) under key, gzip-compressed when compress.
	Put(ctx context.Context, key string, entries []domain.Entry, compress bool) error
}

// Caller is who lists: one tenant's key, or an operator.
type Caller struct {
	Tenant   string
	Operator bool
}

// Config configures App.
type Config struct {
	Store     Store
	Expirer   Expirer
	Archive   Archive // nil: expired entries are deleted without an archive
	Retention domain.Retention
	// Batch is how many entries one archive object holds (default 10000).
	Batch  int
	Now    func() time.Time
	Logger *slog.Logger
}

// App is the audit log's use cases.
type App struct{ cfg Config }

// New returns the use cases over cfg.
func New(cfg Config) *App {
	if cfg.Batch <= 0 {
		cfg.Batch = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &App{cfg: cfg}
}

// ListAuditLogs returns one page of the entries c may see that in selects,
// and the token of the next page ("" on the last). A bad filter is a
// *domain.InvalidError.
func (a *App) ListAuditLogs(ctx context.Context, c Caller, in domain.QueryInput) ([]domain.Entry, string, error) {
	q, err := domain.ParseQuery(in, domain.Scope{Tenant: c.Tenant, AllTenants: c.Operator})
	if err != nil {
		return nil, "", err
	}
	entries, err := a.cfg.Store.List(ctx, q)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(entries) > q.PageSize {
		entries = entries[:q.PageSize]
		next = entries[len(entries)-1].Cursor().Token()
	}
	return entries, next, nil
}

// ExpireReport says what one retention pass did.
type ExpireReport struct {
	Cutoff   time.Time
	Deleted  int
	Archived []string // object keys written
}

// Expire archives (unless the retention says not to) and deletes every
// entry older than the retention allows at the injected clock's now, in
// batches of Batch, one archive object per batch. A failed archive
// deletes nothing of its batch.
func (a *App) Expire(ctx context.Context) (ExpireReport, error) {
	r := a.cfg.Retention
	rep := ExpireReport{Cutoff: r.Cutoff(a.cfg.Now())}
	for {
		n, err := a.cfg.Expirer.Expire(ctx, rep.Cutoff, a.cfg.Batch, func(ctx context.Context, entries []domain.Entry) error {
			if !r.Archive || a.cfg.Archive == nil || len(entries) == 0 {
				return nil
			}
			key := ArchiveKey(entries[0], r.Compress)
			if err := a.cfg.Archive.Put(ctx, key, entries, r.Compress); err != nil {
				return fmt.Errorf("archive %d audit entries to %s: %w", len(entries), key, err)
			}
			rep.Archived = append(rep.Archived, key)
			return nil
		})
		if err != nil {
			return rep, err
		}
		rep.Deleted += n
		if n == 0 {
			return rep, nil
		}
	}
}

// ArchiveKey names the archive object whose oldest entry is first:
// audit/<yyyy>/<mm>/<dd>/<time>-<event id>.jsonl[.gz], by that entry's
// time, so objects sort by time and one entry can only start one object.
func ArchiveKey(first domain.Entry, compress bool) string {
	ext := ".jsonl"
	if compress {
		ext += ".gz"
	}
	at := first.At.UTC()
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, first.ID)
	return fmt.Sprintf("audit/%s/%s-%s%s", at.Format("2006/01/02"), at.Format("20060102T150405.000000000Z"), id, ext)
}

// RunRetention runs Expire every interval until ctx is done, logging what
// each pass did; a failed pass is logged and tried again next time.
func (a *App) RunRetention(ctx context.Context, every time.Duration) {
	for {
		rep, err := a.Expire(ctx)
		switch {
		case errors.Is(err, context.Canceled):
			return
		case err != nil:
			a.cfg.Logger.Error("audit retention pass failed", "err", err)
		case rep.Deleted > 0:
			a.cfg.Logger.Info("audit entries expired", "before", rep.Cutoff, "deleted", rep.Deleted, "archives", len(rep.Archived))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
