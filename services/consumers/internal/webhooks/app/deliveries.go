package app

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// Cursor is a delivery's place in the listing order.
type Cursor struct {
	At time.Time
	ID string
}

// Token continues a listing after c.
func (c Cursor) Token() string { return strconv.FormatInt(c.At.UnixNano(), 10) + "_" + c.ID }

func parseCursor(s string) (*Cursor, error) {
	ns, id, ok := strings.Cut(s, "_")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, &domain.InvalidError{Field: "page_token", Reason: "is not one this API gave"}
	}
	return &Cursor{At: time.Unix(0, n).UTC(), ID: id}, nil
}

// scope is the tenant whose deliveries c sees ("" = every tenant), given
// the tenant an operator asked for.
func scope(c Caller, tenant string) (string, error) {
	switch {
	case c.Operator:
		return tenant, nil
	case tenant != "" && tenant != c.Tenant:
		return "", &domain.InvalidError{Field: "tenant_id", Reason: "is for operator keys; an API key sees its own tenant's deliveries"}
	}
	return c.Tenant, nil
}

// ListDeliveries returns one page of the deliveries c may see, newest
// first, and the next page's token.
func (a *App) ListDeliveries(ctx context.Context, c Caller, state, taskID, tenant string, pageSize int, token string) ([]DeliveryView, string, error) {
	t, err := scope(c, tenant)
	if err != nil {
		return nil, "", err
	}
	switch {
	case pageSize == 0:
		pageSize = 100
	case pageSize < 0 || pageSize > 1000:
		return nil, "", &domain.InvalidError{Field: "page_size", Reason: "must be 1 to 1000"}
	}
	f := DeliveryFilter{Tenant: t, State: state, TaskID: taskID, PageSize: pageSize}
	if token != "" {
		if f.After, err = parseCursor(token); err != nil {
			return nil, "", err
		}
	}
	views, err := a.cfg.Deliveries.List(ctx, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(views) > pageSize {
		views = views[:pageSize]
		last := views[len(views)-1]
		next = Cursor{At: last.CreatedAt, ID: last.ID}.Token()
	}
	return views, next, nil
}

// GetDelivery returns one delivery c may see with its attempts, or
// ErrNotFound.
func (a *App) GetDelivery(ctx context.Context, c Caller, id string) (DeliveryView, []Attempt, error) {
	t, _ := scope(c, "")
	return a.cfg.Deliveries.Get(ctx, t, id)
}

// Redeliver sends a delivery c may see again now, with another MaxAge of
// retries, whatever its state, and wakes the dispatcher.
func (a *App) Redeliver(ctx context.Context, c Caller, id string) (DeliveryView, error) {
	t, _ := scope(c, "")
	now := a.cfg.Now().UTC()
	v, err := a.cfg.Deliveries.Redeliver(ctx, t, id, now, now.Add(a.cfg.Backoff.MaxAge))
	if err == nil {
		a.Wake()
	}
	return v, err
}
