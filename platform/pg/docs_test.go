package pg_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

type doc struct {
	N int `json:"n"`
}

func decodeDoc(b []byte, d *doc) error { return json.Unmarshal(b, d) }

// Documents come back in row order; no rows is nil; a document that does
// not decode, or a column that is not one, fails the read and names what
// was read.
func TestCollectDocs(t *testing.T) {
	ctx := testCtx(t)
	pool := pgtest.New(t).Open(t, "")
	rows, err := pool.Query(ctx, `SELECT d FROM (VALUES (1, '{"n":2}'::jsonb), (2, '{"n":1}'::jsonb)) AS x(o, d) ORDER BY o`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pg.CollectDocs(rows, "test doc", decodeDoc)
	if err != nil || fmt.Sprint(got) != "[{2} {1}]" {
		t.Fatalf("docs = %v, %v; want [{2} {1}]", got, err)
	}

	rows, err = pool.Query(ctx, `SELECT '{}'::jsonb WHERE false`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pg.CollectDocs(rows, "test doc", decodeDoc); err != nil || got != nil {
		t.Fatalf("no rows = %#v, %v; want nil", got, err)
	}

	rows, err = pool.Query(ctx, `SELECT '{"n":"two"}'::jsonb`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CollectDocs(rows, "test doc", decodeDoc); err == nil || !strings.HasPrefix(err.Error(), "decode test doc: ") {
		t.Fatalf("undecodable doc: %v, want decode test doc: …", err)
	}

	rows, err = pool.Query(ctx, `SELECT 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CollectDocs(rows, "test doc", decodeDoc); err == nil || !strings.HasPrefix(err.Error(), "read test doc: ") {
		t.Fatalf("two columns: %v, want read test doc: …", err)
	}
	// Every read closed its rows: the pool's connection is free again.
	if n := queryInt(t, pool, `SELECT 1`); n != 1 {
		t.Fatalf("SELECT 1 = %d", n)
	}
}
