package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	pipelinepg "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/adapters/postgres"
	pipelineapp "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// Uploads no job used expire, on real Postgres and the filesystem object
// store, swept by two competing replicas' sweepers (one holds the lock):
// the object is deleted, the key refused with its reason, and the uploads
// a job was created from stay.
func TestPipelineUploadsExpireThroughTheLeaderSweeper(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pg.Open(ctx, pg.Config{URL: pgtest.New(t).URL, Schema: scheduler.PipelineSchema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects",
		Secret: []byte(strings.Repeat("s", objectstore.MinSecretLen))})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	clk := clocktest.NewFixed(t0)
	store := &pipelinepg.Store{DB: pool}
	a := pipelineapp.New(pipelineapp.Config{Tasks: sched.New(apptest.NewStore().Stores(), objects, clk.Now, sched.NewHub(), sched.Config{}, nil),
		Jobs: store, Uploads: store, Objects: objects, Worker: []string{"taskmesh", "pipeline-stage"}, Now: clk.Now})
	acme := sched.Caller{Tenant: "acme", Subject: "key-acme", Tier: "standard"}
	upload := func(kind, name string, body []byte) pipelineapp.Upload {
		t.Helper()
		u, err := a.Upload(ctx, acme, kind, name, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	onnx := []byte("\x08\x07\x12\x07pytorch\x3a\x00")
	zip := []byte("PK\x03\x04" + strings.Repeat("\x00", 26) + "PK\x05\x06" + strings.Repeat("\x00", 18))
	model, quant := upload("model", "m.onnx", onnx), upload("quant", "q.zip", zip)
	unused := upload("model", "unused.onnx", onnx)
	clk.Set(t0.Add(time.Hour))
	if _, err := a.CreateJob(ctx, acme, domain.JobRequest{ModelKey: model.Key, QuantKey: quant.Key}); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Upload(ctx, "acme", model.Key); !got.UsedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("the used model's used_at = %v", got.UsedAt)
	}
	// Marking used uploads again reads them and writes nothing: the rows
	// keep their version and their first use.
	rowVersion := func(key string) (xmin string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT xmin::text FROM uploads WHERE key = $1`, key).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	before := rowVersion(model.Key)
	if err := store.UseUploads(ctx, "acme", []string{model.Key, quant.Key}, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if after := rowVersion(model.Key); after != before {
		t.Errorf("marking a used upload again wrote its row (xmin %s → %s)", before, after)
	}
	if got, _ := store.Upload(ctx, "acme", model.Key); !got.UsedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("marking a used upload again moved its used_at to %v", got.UsedAt)
	}
	// Marking another tenant's key (or an unknown one) fails, naming it.
	var expired *pipelineapp.UploadExpiredError
	if err := store.UseUploads(ctx, "other", []string{model.Key}, t0); !errors.As(err, &expired) || expired.Key != model.Key {
		t.Errorf("another tenant's key marked: %v", err)
	}

	clk.Set(t0.Add(25 * time.Hour))
	log := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := scheduler.RunUploadSweeper(ctx, pool, a, 20*time.Millisecond, log); err != nil {
				t.Error(err)
			}
		}()
	}
	defer wg.Wait()
	// The sweep deletes the object, then records the deletion: wait for
	// the record, then check both.
	purged := func() bool {
		t.Helper()
		var done bool
		if err := pool.QueryRow(ctx, `SELECT expired_at = $2 AND purged_at IS NOT NULL FROM uploads WHERE key = $1`, unused.Key,
			t0.Add(25*time.Hour)).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done
	}
	for deadline := time.Now().Add(20 * time.Second); !purged(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the unused upload was not expired and purged")
		}
	}
	// The object is gone; the used uploads and their objects stay.
	if _, err := objects.Stat(ctx, unused.Key); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("the expired upload's object: %v", err)
	}
	for _, k := range []string{model.Key, quant.Key} {
		if _, err := objects.Stat(ctx, k); err != nil {
			t.Errorf("used upload %s: %v", k, err)
		}
		if u, err := store.Upload(ctx, "acme", k); err != nil || !u.ExpiredAt.IsZero() {
			t.Errorf("used upload %s: %+v, %v", k, u, err)
		}
	}
	_, err = a.CreateJob(ctx, acme, domain.JobRequest{ModelKey: unused.Key, QuantKey: quant.Key})
	var invalid *domain.InvalidError
	if !errors.As(err, &invalid) || invalid.Field != "model_key" || !strings.Contains(invalid.Reason, "expired") {
		t.Errorf("a job from the expired upload: %v", err)
	}
	if err := store.UseUploads(ctx, "acme", []string{quant.Key, unused.Key}, clk.Now()); !errors.As(err, &expired) || expired.Key != unused.Key {
		t.Errorf("marking the expired upload used: %v", err)
	}
	if _, err := a.CreateJob(ctx, acme, domain.JobRequest{ModelKey: model.Key, QuantKey: quant.Key}); err != nil {
		t.Errorf("a job from the used uploads: %v", err)
	}
	// Exactly one replica sweeps: one session holds the sweeper's lock.
	var holders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&holders); err != nil || holders != 1 {
		t.Errorf("advisory locks held: %d, %v", holders, err)
	}
	cancel()
}
