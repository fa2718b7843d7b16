package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// The list statements are prepared, so after a few runs Postgres may plan
// them once for any parameters (a generic plan). A tenant's page must then
// still read that tenant's range of an index, in order, whatever the
// other tenants hold: with "($1 = '*' OR tenant_id = $1)" the generic
// plan scanned every tenant's tasks and sorted them, which is how a loaded
// database made the filtered page slow (docs/operations.md, "Measuring at
// scale").
func TestListPlansUseTheTenantsIndexes(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	// 40 tenants' history: mostly finished tasks, a backlog of pending
	// ones, a few running.
	if _, err := pool.Exec(ctx, `INSERT INTO task_views (id, tenant_id, status, priority, type, name, created_at, updated_at, version, doc)
		SELECT 'task-' || g, 'tenant-' || (g % 40), CASE WHEN g % 97 = 0 THEN 'running' WHEN g % 5 = 0 THEN 'pending' ELSE 'completed' END,
		       1 + g % 10, CASE WHEN g % 7 = 0 THEN 'python' WHEN g % 251 = 0 THEN 'video' ELSE 'shell' END, 'n',
		       now() - g * interval '1 second', now(), 3, '{}'
		FROM generate_series(1, 60000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE task_views`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		f    app.ListFilter
	}{
		{"first page", app.ListFilter{Tenant: "tenant-7", PageSize: 50}},
		{"status and priority", app.ListFilter{Tenant: "tenant-7", Status: "running", Priority: 5, PageSize: 50}},
		{"pending", app.ListFilter{Tenant: "tenant-7", Status: "pending", PageSize: 50}},
		{"completed", app.ListFilter{Tenant: "tenant-7", Status: "completed", PageSize: 50}},
		// The type is a filter on the tenant's range of an index, as the
		// group and the machine are: it needs no index of its own.
		{"type", app.ListFilter{Tenant: "tenant-7", Type: "python", PageSize: 50}},
		{"a rare type", app.ListFilter{Tenant: "tenant-7", Type: "video", PageSize: 50}},
		{"type and pending", app.ListFilter{Tenant: "tenant-7", Status: "pending", Type: "shell", PageSize: 50}},
		{"type and a day", app.ListFilter{Tenant: "tenant-7", Type: "shell", PageSize: 50,
			CreatedAfter: time.Now().Add(-24 * time.Hour), CreatedBefore: time.Now()}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			query, args, err := postgres.ListQuery(c.f)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("list%d", i)
			if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+query); err != nil {
				t.Fatal(err)
			}
			plan := explain(t, conn.Conn(), "EXPLAIN (COSTS OFF) EXECUTE "+name+"("+literals(t, args)+")")
			if !strings.Contains(plan, "Index Cond: ((tenant_id = $1)") && !strings.Contains(plan, "Index Cond: (tenant_id = $1)") {
				t.Errorf("the generic plan does not read the tenant's index range:\n%s", plan)
			}
			if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
				t.Errorf("the generic plan scans or sorts:\n%s", plan)
			}
		})
	}
	// Operators list every tenant's tasks: no tenant condition at all.
	query, _, err := postgres.ListQuery(app.ListFilter{Tenant: "*", PageSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(query, "tenant_id") {
		t.Errorf("an operator's list names a tenant: %s", query)
	}
}

func literals(t *testing.T, args []any) string {
	t.Helper()
	var out []string
	for _, a := range args {
		switch v := a.(type) {
		case string:
			out = append(out, "'"+strings.ReplaceAll(v, "'", "''")+"'")
		case int, int32, int64:
			out = append(out, fmt.Sprint(v))
		case time.Time:
			out = append(out, "'"+v.UTC().Format(time.RFC3339Nano)+"'")
		default:
			t.Fatalf("no literal for %T", a)
		}
	}
	return strings.Join(out, ", ")
}

// explain runs an EXPLAIN statement on q (a connection or a transaction)
// and returns the plan's text.
func explain(t *testing.T, q postgres.Querier, stmt string, args ...any) string {
	t.Helper()
	return pgtest.Explain(t, q, stmt, args...)
}
