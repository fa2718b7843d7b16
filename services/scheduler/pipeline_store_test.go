package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	pipelinepg "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// The pipeline's Postgres store: jobs are scoped to their tenant, changes
// are events plus the row they fold into, the active list pages by id, and
// the jobs table is rebuilt from the events alone.
func TestPipelineStoreKeepsJobsAsTheFoldOfTheirEvents(t *testing.T) {
	ctx := context.Background()
	pool, err := pg.Open(ctx, pg.Config{URL: pgtest.New(t).URL, Schema: scheduler.PipelineSchema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	notified := 0
	s := &pipelinepg.Store{DB: pool, AfterCommit: func() { notified++ }}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ids := []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"}
	for _, id := range ids {
		if _, err := s.Create(ctx, domain.Submit(at, id, "acme", "key-1", "", domain.Inputs{Model: domain.ModelObject(id),
			Quant: domain.QuantObject(id), RefImages: []string{domain.RefImageObject(id, 0, "cat.png")}},
			domain.InputKeys{Model: "uploads/m", Quant: "uploads/q"})); err != nil {
			t.Fatal(err)
		}
	}
	step := func(id string, decide func(j domain.Job) []domain.Record) domain.Job {
		t.Helper()
		j, err := s.Mutate(ctx, id, func(j domain.Job) ([]domain.Record, error) { return decide(j), nil })
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	step(ids[0], func(j domain.Job) []domain.Record { return j.QueueStage(at, "pipeline", domain.StageONNX, "t1") })
	step(ids[0], func(j domain.Job) []domain.Record {
		return j.ReportProgress(at.Add(time.Second), "pipeline", domain.StageONNX, "t1", 50, "half")
	})
	done := step(ids[0], func(j domain.Job) []domain.Record {
		return j.StageDone(at.Add(2*time.Second), "pipeline", domain.StageONNX, "t1", domain.OutputObject(j.ID, domain.StageONNX))
	})
	failed := step(ids[1], func(j domain.Job) []domain.Record {
		return j.Fail(at.Add(3*time.Second), "pipeline", domain.StageONNX, "", "could not be queued")
	})
	if done.Status != domain.StatusBIE || done.Version != 4 || failed.Status != domain.StatusFailed || notified != 6 {
		t.Fatalf("done %+v failed %+v notified %d", done, failed, notified)
	}
	// Nothing recorded: nothing written, nobody woken.
	step(ids[0], func(j domain.Job) []domain.Record { return nil })
	if notified != 6 {
		t.Errorf("a change that recorded nothing notified the relay")
	}
	if _, err := s.Mutate(ctx, "nope", func(domain.Job) ([]domain.Record, error) { return nil, nil }); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if got, err := s.Get(ctx, "acme", ids[0]); err != nil || got.Version != done.Version {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if _, err := s.Get(ctx, "other", ids[0]); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's job: %v", err)
	}
	if active, err := s.Active(ctx, "", 10); err != nil || len(active) != 1 || active[0].ID != ids[0] {
		t.Errorf("Active = %v, %v", active, err)
	}
	if active, _ := s.Active(ctx, ids[0], 10); len(active) != 0 {
		t.Errorf("Active after the last id = %v", active)
	}
	// Uploads are their tenant's.
	u := app.Upload{Key: "uploads/u1/model.onnx", TenantID: "acme", Kind: domain.KindModel, Name: "model.onnx", Size: 3,
		SHA256: "abc", CreatedAt: at}
	if err := s.SaveUpload(ctx, u); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Upload(ctx, "acme", u.Key); err != nil || got.Kind != domain.KindModel || got.Size != 3 {
		t.Errorf("Upload = %+v, %v", got, err)
	}
	if _, err := s.Upload(ctx, "other", u.Key); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's upload: %v", err)
	}

	rep, err := scheduler.RebuildPipelineJobs(ctx, pool, false)
	if err != nil || rep.Jobs != 2 || rep.Events != 6 || len(rep.Differences) != 0 {
		t.Fatalf("rebuild = %+v, %v", rep, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE jobs SET doc = jsonb_set(doc, '{status}', '"COMPLETED"') WHERE job_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if rep, _ = scheduler.RebuildPipelineJobs(ctx, pool, true); len(rep.Differences) != 1 || rep.Differences[0] != ids[0] {
		t.Fatalf("a tampered row: %+v", rep)
	}
	if rep, _ = scheduler.RebuildPipelineJobs(ctx, pool, false); len(rep.Differences) != 0 {
		t.Errorf("after the rebuild: %+v", rep)
	}
	if got, _ := s.Get(ctx, "acme", ids[0]); got.Status != domain.StatusBIE {
		t.Errorf("rebuilt row: %+v", got)
	}
}
