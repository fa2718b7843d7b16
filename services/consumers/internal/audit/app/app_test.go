package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

// memory is a recording in-memory audit log: Store and Expirer.
type memory struct {
	entries []domain.Entry
	queries []domain.Query
	mark    time.Time
}

func (m *memory) List(_ context.Context, q domain.Query) ([]domain.Entry, error) {
	m.queries = append(m.queries, q)
	var out []domain.Entry
	for _, e := range m.entries {
		if q.Tenant == "" || e.TenantID == q.Tenant {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.After(out[j].At) })
	if q.After != nil {
		for i, e := range out {
			if e.ID == q.After.ID {
				out = out[i+1:]
				break
			}
		}
	}
	return out[:min(len(out), q.PageSize+1)], nil
}

func (m *memory) Expire(ctx context.Context, cutoff time.Time, n int, archive func(context.Context, []domain.Entry) error) (int, error) {
	m.mark = cutoff
	var old []domain.Entry
	for _, e := range m.entries {
		if e.At.Before(cutoff) {
			old = append(old, e)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].At.Before(old[j].At) })
	old = old[:min(len(old), n)]
	if err := archive(ctx, old); err != nil {
		return 0, err
	}
	m.entries = slices.DeleteFunc(m.entries, func(e domain.Entry) bool {
		return slices.ContainsFunc(old, func(o domain.Entry) bool { return o.ID == e.ID })
	})
	return len(old), nil
}

type archive struct {
	objects map[string][]domain.Entry
	fail    error
}

func (a *archive) Put(_ context.Context, key string, entries []domain.Entry, compress bool) error {
	if a.fail != nil {
		return a.fail
	}
	if a.objects == nil {
		a.objects = map[string][]domain.Entry{}
	}
	a.objects[fmt.Sprintf("%s compress=%v", key, compress)] = entries
	return nil
}

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func entries(n int) []domain.Entry {
	var out []domain.Entry
	for i := range n {
		tenant := "acme"
		if i%2 == 1 {
			tenant = "other"
		}
		out = append(out, domain.Entry{ID: fmt.Sprintf("ev-%02d", i), At: now.Add(-time.Duration(i) * 24 * time.Hour), TenantID: tenant,
			Action: "task.created", Resource: "task"})
	}
	return out
}

func TestListAuditLogsScopesAndPages(t *testing.T) {
	m := &memory{entries: entries(10)}
	a := app.New(app.Config{Store: m, Now: func() time.Time { return now }})
	ctx := context.Background()
	page, next, err := a.ListAuditLogs(ctx, app.Caller{Tenant: "acme"}, domain.QueryInput{PageSize: 3})
	if err != nil || len(page) != 3 || next == "" || page[0].ID != "ev-00" || page[2].ID != "ev-04" {
		t.Fatalf("first page = %v, %q, %v", page, next, err)
	}
	page, next, err = a.ListAuditLogs(ctx, app.Caller{Tenant: "acme"}, domain.QueryInput{PageSize: 3, PageToken: next})
	if err != nil || len(page) != 2 || next != "" || page[0].ID != "ev-06" {
		t.Fatalf("last page = %v, %q, %v", page, next, err)
	}
	if m.queries[0].Tenant != "acme" {
		t.Errorf("a tenant's query was not scoped: %+v", m.queries[0])
	}
	all, _, err := a.ListAuditLogs(ctx, app.Caller{Operator: true}, domain.QueryInput{})
	if err != nil || len(all) != 10 {
		t.Errorf("an operator sees %d entries, %v", len(all), err)
	}
	if _, _, err := a.ListAuditLogs(ctx, app.Caller{Tenant: "acme"}, domain.QueryInput{TenantID: "other"}); !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("a tenant asked for another tenant: %v", err)
	}
	calls := len(m.queries)
	if _, _, err := a.ListAuditLogs(ctx, app.Caller{Tenant: "acme"}, domain.QueryInput{From: "tomorrow"}); !errors.Is(err, domain.ErrInvalid) || len(m.queries) != calls {
		t.Errorf("a bad filter reached the store or passed: %v", err)
	}
}

func TestExpireArchivesThenDeletes(t *testing.T) {
	m := &memory{entries: entries(10)} // ages 0 to 9 days
	ar := &archive{}
	clock := now
	a := app.New(app.Config{Store: m, Expirer: m, Archive: ar, Batch: 2, Now: func() time.Time { return clock },
		Retention: domain.Retention{Keep: 5*24*time.Hour - time.Minute, Archive: true, Compress: true}})
	rep, err := a.Expire(context.Background())
	if err != nil || rep.Deleted != 5 || len(rep.Archived) != 3 || len(m.entries) != 5 || !m.mark.Equal(now.Add(-5*24*time.Hour+time.Minute)) {
		t.Fatalf("expire = %+v, %v; left %d", rep, err, len(m.entries))
	}
	first := rep.Archived[0]
	if first != "audit/2026/11/13/20261113T120000.000000000Z-ev-09.jsonl.gz" || len(ar.objects[first+" compress=true"]) != 2 {
		t.Errorf("first archive %q: %v", first, ar.objects)
	}

	// Nothing more to do at the same time; a later clock expires more.
	if rep, err := a.Expire(context.Background()); err != nil || rep.Deleted != 0 {
		t.Errorf("second pass = %+v, %v", rep, err)
	}
	ar.fail = errors.New("object store down")
	clock = now.Add(24 * time.Hour)
	if _, err := a.Expire(context.Background()); err == nil || len(m.entries) != 5 {
		t.Errorf("a failed archive: %v, %d entries left (want 5: nothing deleted)", err, len(m.entries))
	}

	// archive: false deletes without writing objects.
	ar.fail, ar.objects = nil, nil
	b := app.New(app.Config{Expirer: m, Archive: ar, Now: func() time.Time { return clock },
		Retention: domain.Retention{Keep: 2 * 24 * time.Hour}})
	if rep, err := b.Expire(context.Background()); err != nil || rep.Deleted != 3 || len(ar.objects) != 0 {
		t.Errorf("archive off = %+v, %v, %v", rep, err, ar.objects)
	}
}

func TestArchiveKeyIsAValidObjectKey(t *testing.T) {
	k := app.ArchiveKey(domain.Entry{ID: "ev/\uFFFD 1", At: now}, false)
	if k != "audit/2026/11/22/20261122T120000.000000000Z-ev___1.jsonl" {
		t.Errorf("key = %q", k)
	}
}
