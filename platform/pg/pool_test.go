package pg_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

func TestOpenPutsSchemaFirstInSearchPath(t *testing.T) {
	db := pgtest.New(t)
	ctx := testCtx(t)
	pool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: "billing", MaxConns: 3, ApplicationName: "billing-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 3 {
		t.Errorf("MaxConns = %d, want 3", got)
	}
	// The schema need not exist when the pool is opened (Migrate creates
	// it later); PostgreSQL resolves search_path on every lookup.
	mustExec(t, pool, `CREATE SCHEMA billing`)
	mustExec(t, pool, `CREATE TABLE invoices (id int)`)
	var schema string
	if err := pool.QueryRow(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'invoices'`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if schema != "billing" {
		t.Errorf("unqualified table created in %q, want billing", schema)
	}
	// Every connection of the pool has it, not just the first.
	conns := make([]interface{ Release() }, 0, 3)
	for range 3 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var schemas []string
		var app string
		if err := c.QueryRow(ctx, `SELECT current_schemas(false), current_setting('application_name')`).Scan(&schemas, &app); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(schemas, []string{"billing", "public"}) || app != "billing-test" {
			t.Errorf("connection has schemas %v, application_name %q", schemas, app)
		}
	}
	for _, c := range conns {
		c.Release()
	}
}

func TestOpenWithoutSchemaUsesPublic(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE plain (id int)`)
	if n := queryInt(t, pool, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'plain'`); n != 1 {
		t.Error("unqualified table not created in public")
	}
}

func TestOpenRejectsInvalidSchema(t *testing.T) {
	db := pgtest.New(t)
	for _, schema := range []string{"Billing", "pg_catalog", "1st", "a-b", `x"; DROP SCHEMA public; --`, strings.Repeat("a", 64)} {
		pool, err := pg.Open(testCtx(t), pg.Config{URL: db.URL, Schema: schema})
		if err == nil {
			pool.Close()
			t.Errorf("Open accepted schema %q", schema)
		}
	}
}

func TestOpenFailsWhenServerUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pool, err := pg.Open(testCtx(t), pg.Config{URL: "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/x?sslmode=disable&connect_timeout=2"})
	if err == nil {
		pool.Close()
		t.Fatal("Open succeeded without a server")
	}
}

func TestOpenTracesQueries(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	pool := pgtest.New(t).Open(t, "")
	// otelpgx records queries as children of the caller's span (a request
	// being served), not as root spans.
	ctx, parent := otel.Tracer("test").Start(context.Background(), "request")
	if _, err := pool.Exec(ctx, `SELECT 42`); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var found bool
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "db.query.text" && a.Value.AsString() == "SELECT 42" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no child span of the request carries the query; %d spans ended", len(rec.Ended()))
	}
}

func TestOpenPlansForOLTP(t *testing.T) {
	pool := pgtest.New(t).Open(t, "plancheck")
	var jit, mode string
	if err := pool.QueryRow(context.Background(), `SELECT current_setting('jit'), current_setting('plan_cache_mode')`).Scan(&jit, &mode); err != nil ||
		jit != "off" || mode != "force_custom_plan" {
		t.Fatalf("jit = %q, plan_cache_mode = %q, %v", jit, mode, err)
	}
}
