// Package app holds usage metering's use case: the report a tenant or an
// operator asks for (Report), priced with the operator's price table. The
// metering itself is the consumer's Apply (adapters/postgres), fed by
// platform/consumer.
package app

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
)

// Store reads metered usage.
type Store interface {
	// Sums adds up the usage q selects, per group of q.GroupBy and per
	// kind, flavor, model and resolution (what prices depend on).
	Sums(ctx context.Context, q domain.Query) ([]domain.Sum, error)
}

// Caller is who asks: a tenant's key, or an operator.
type Caller struct {
	Tenant   string
	Operator bool
}

// Report is a priced usage report.
type Report struct {
	Query    domain.Query
	Currency string
	Rows     []domain.Row
	Total    domain.Row
}

// App is the use case.
type App struct {
	store  Store
	prices domain.Prices
	now    func() time.Time
}

// New returns the use case with prices (checked by the caller).
func New(store Store, prices domain.Prices, now func() time.Time) *App {
	if now == nil {
		now = time.Now
	}
	return &App{store: store, prices: prices, now: now}
}

// Report sums and prices the usage c may see between from and to (see
// domain.ParseQuery), grouped by groupBy. A bad request is a
// *domain.InvalidError.
func (a *App) Report(ctx context.Context, c Caller, from, to, groupBy, tenant string) (Report, error) {
	q, err := domain.ParseQuery(from, to, groupBy, tenant, c.Tenant, c.Operator, a.now())
	if err != nil {
		return Report{}, err
	}
	sums, err := a.store.Sums(ctx, q)
	if err != nil {
		return Report{}, err
	}
	rows, total := domain.Rows(sums, a.prices)
	return Report{Query: q, Currency: a.prices.Currency, Rows: rows, Total: total}, nil
}
