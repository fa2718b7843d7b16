package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

// ResultsPrefix is where results live in the object store
// (results/<tenant>/<task>/<attempt>.json).
const ResultsPrefix = "results/"

// ErrResultExpired: the task's result was in the object store longer than
// its retention and is gone (30004, see ports).
var ErrResultExpired = errors.New("result expired")

// SetUpResultRetention asks the object store to expire results by itself
// (an S3 lifecycle rule) and reports whether it does; otherwise the
// sweeper deletes them (SweepResults). Call it once at start-up.
func (a *App) SetUpResultRetention(ctx context.Context) bool {
	e, ok := a.objects.(objectstore.Expirer)
	if !ok {
		return false
	}
	if err := e.SetExpiry(ctx, ResultsPrefix, a.cfg.ResultRetention); err != nil {
		a.log.Warn("the object store does not expire results itself; the sweeper deletes them", "err", err)
		return false
	}
	a.selfExpiring = true
	a.log.Info("the object store expires results by itself", "after", a.cfg.ResultRetention.String())
	return true
}

// SweepResults deletes results stored longer ago than ResultRetention and
// returns how many, at most once per ResultSweepInterval (the sweeper
// calls it every sweep) and never for a store that expires them itself.
func (a *App) SweepResults(ctx context.Context) (int, error) {
	now := a.now()
	l, ok := a.objects.(objectstore.Lister)
	if !ok || a.selfExpiring || now.Sub(a.resultSweep) < a.cfg.ResultSweepInterval {
		return 0, nil
	}
	a.resultSweep = now
	n, err := objectstore.ExpireOld(ctx, l, a.objects, ResultsPrefix, now.Add(-a.cfg.ResultRetention))
	if err != nil {
		return n, fmt.Errorf("sweep expired results: %w", err)
	}
	return n, nil
}
