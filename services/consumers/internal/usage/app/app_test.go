package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
)

type store struct{ queries []domain.Query }

func (s *store) Sums(_ context.Context, q domain.Query) ([]domain.Sum, error) {
	s.queries = append(s.queries, q)
	return []domain.Sum{{Key: "b", Kind: domain.KindGPU, Quantity: 100, Items: 1}, {Key: "a", Kind: domain.KindCPU, Quantity: 10, Items: 2}}, nil
}

func TestReport(t *testing.T) {
	s := &store{}
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	a := app.New(s, domain.Prices{Currency: "USD", GPUSecond: 0.01, CPUSecond: 0.001}, func() time.Time { return now })
	r, err := a.Report(context.Background(), app.Caller{Tenant: "acme"}, "2026-11-01", "", "queue", "")
	if err != nil || r.Currency != "USD" || len(r.Rows) != 2 || r.Rows[0].Key != "a" || r.Total.Amount != 1.01 || r.Total.Items != 3 {
		t.Fatalf("report = %+v, %v", r, err)
	}
	if q := s.queries[0]; q.Tenant != "acme" || q.GroupBy != domain.ByQueue {
		t.Errorf("query = %+v", q)
	}
	if _, err := a.Report(context.Background(), app.Caller{Tenant: "acme"}, "", "", "", "globex"); !errors.Is(err, domain.ErrInvalid) || len(s.queries) != 1 {
		t.Errorf("another tenant's usage: %v", err)
	}
	if _, err := a.Report(context.Background(), app.Caller{Operator: true}, "", "", "tenant", ""); err != nil || s.queries[1].Tenant != "" {
		t.Errorf("operator: %v %+v", err, s.queries)
	}
}
