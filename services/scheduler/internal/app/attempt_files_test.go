package app_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// put stores body at key as an agent's presigned PUT would.
func (h *harness) put(key, body string) (int64, string) {
	h.t.Helper()
	if _, err := h.objects.Put(h.ctx, key, strings.NewReader(body), int64(len(body)), "application/octet-stream"); err != nil {
		h.t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	return int64(len(body)), hex.EncodeToString(sum[:])
}

func cooperative(in *domain.SpecInput) { in.Checkpoint, in.GracePeriod = new(true), intp(5) }

func TestCheckpointOfAPreemptedTask(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter, c.TimeoutSlack = time.Hour, time.Second })
	victim := h.running("a1", "m1", spec("victim", cooperative))
	generic := h.running("a1", "m1", spec("generic"))
	preemptor := h.running("a2", "m2", spec("preemptor"))
	for _, id := range []string{victim.ID, generic.ID} {
		if _, err := h.store.Mutate(h.ctx, id, func(t domain.Task) ([]domain.Record, error) {
			return t.Preempt(h.clock.Now(), preemptor.ID, "room")
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.app.CreateCheckpointUpload(h.ctx, agent("a1"), generic.ID, "a1", generic.AttemptID, 10, "")
	wantErr(t, "checkpoint upload of a generic task (30002)", err, domain.ErrImmutable)
	_, err = h.app.CreateCheckpointUpload(h.ctx, agent("a2"), victim.ID, "a2", victim.AttemptID, 10, "")
	wantErr(t, "checkpoint upload by another agent (30001)", err, domain.ErrAttemptMismatch)
	digest := strings.Repeat("ab", 32)
	up, err := h.app.CreateCheckpointUpload(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID, 10, digest)
	if err != nil || up.URL == "" || up.Key != "checkpoints/t1/"+victim.ID+"/"+victim.AttemptID+".tar.gz" {
		t.Fatalf("upload = %+v, %v", up, err)
	}
	if !strings.Contains(up.URL, "X-SHA256="+digest) {
		t.Fatalf("checkpoint upload link %s is not bound to the archive's sha256", up.URL)
	}
	// Not uploaded yet: refused. The preemptor finishing does not requeue
	// the victim while its checkpoint may still come.
	_, err = h.app.RecordTaskCheckpoint(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID, app.ResultObject{Key: up.Key, Size: 10})
	wantInvalid(t, "record before the upload", err, "object_key")
	if _, err := h.app.CompleteTask(h.ctx, agent("a2"), preemptor.ID, app.Completion{AgentID: "a2", AttemptID: preemptor.AttemptID}); err != nil {
		t.Fatal(err)
	}
	if rep := h.sweep(); rep.Requeued != 1 {
		t.Errorf("report = %+v, want only the generic task requeued", rep)
	}
	h.wantStatus(victim.ID, domain.StatusPreempted)
	h.wantStatus(generic.ID, domain.StatusPending)

	size, sum := h.put(up.Key, "step=41\n\x00x")
	_, err = h.app.RecordTaskCheckpoint(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID, app.ResultObject{Key: "checkpoints/t2/x/y.tar.gz", Size: size})
	wantInvalid(t, "record under another key", err, "object_key")
	_, err = h.app.RecordTaskCheckpoint(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID, app.ResultObject{Key: up.Key, Size: size + 1})
	wantInvalid(t, "record with the wrong size", err, "object_key")
	got, err := h.app.RecordTaskCheckpoint(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID, app.ResultObject{Key: up.Key, Size: size, SHA256: sum})
	if err != nil || got.Checkpoint == nil || got.Checkpoint.Key != up.Key || got.Preemption.Checkpoint != up.Key ||
		got.Preemption.PreemptedBy != preemptor.ID {
		t.Fatalf("recorded = %+v %+v, %v", got.Checkpoint, got.Preemption, err)
	}
	if rep := h.sweep(); rep.Requeued != 1 {
		t.Errorf("report = %+v, want the victim requeued once its checkpoint is saved", rep)
	}
	// The next attempt, on another agent, reads the checkpoint back.
	next := h.claimOne("a3", "m3", victim.ID)
	link, err := h.app.GetTaskCheckpoint(h.ctx, agent("a3"), victim.ID, "a3", next.AttemptID)
	if err != nil || link.Checkpoint == nil || link.Checkpoint.Key != up.Key || link.URL == "" {
		t.Fatalf("checkpoint link = %+v, %v", link, err)
	}
	_, err = h.app.GetTaskCheckpoint(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID)
	wantErr(t, "checkpoint link for the old attempt (30001)", err, domain.ErrAttemptMismatch)
	_, err = h.app.RecordTaskCheckpoint(h.ctx, agent("a1"), victim.ID, "a1", victim.AttemptID, app.ResultObject{Key: up.Key, Size: size})
	wantErr(t, "a late checkpoint of the old attempt (30001)", err, domain.ErrAttemptMismatch)
}

func TestCheckpointWaitEndsAfterTheGracePeriod(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter, c.TimeoutSlack = time.Hour, time.Second })
	victim := h.running("a1", "m1", spec("victim", cooperative))
	if _, err := h.store.Mutate(h.ctx, victim.ID, func(t domain.Task) ([]domain.Record, error) {
		return t.Preempt(h.clock.Now(), "gone", "room")
	}); err != nil {
		t.Fatal(err)
	}
	if rep := h.sweep(); rep.Requeued != 0 {
		t.Errorf("requeued within the grace period: %+v", rep)
	}
	h.clock.Advance(7 * time.Second) // grace 5 s + slack 1 s
	if rep := h.sweep(); rep.Requeued != 1 {
		t.Errorf("not requeued after the grace period: %+v", rep)
	}
}

func TestArtifactsAreListedWithLinks(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("train", func(in *domain.SpecInput) { in.Artifacts = []string{"out/*.pt", "metrics.json"} }))
	for name, p := range map[string]string{"absolute": "/etc/passwd", "climbing": "out/../../x.pt", "unclean": "out//a.pt", "unmatched": "out/a.txt",
		// Names the object store cannot keep: bad input, not a failure.
		"space": "out/a b.pt", "backslash": `out/a\b.pt`, "non-ASCII": "out/modèle.pt"} {
		_, err := h.app.CreateArtifactUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, p, 1, "")
		wantInvalid(t, name+" artifact path", err, "path")
	}
	_, err := h.app.CreateArtifactUpload(h.ctx, agent("a2"), x.ID, "a2", x.AttemptID, "out/a.pt", 1, "")
	wantErr(t, "artifact upload by another agent", err, domain.ErrAttemptMismatch)
	if up, err := h.app.CreateArtifactUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, "out/model..pt", 1, ""); err != nil ||
		up.Key != "artifacts/t1/"+x.ID+"/"+x.AttemptID+"/out/model..pt" {
		t.Fatalf("upload of out/model..pt = %+v, %v", up, err)
	}
	modelSum := sha256.Sum256([]byte("model"))
	up, err := h.app.CreateArtifactUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, "out/model.pt", 5, hex.EncodeToString(modelSum[:]))
	if err != nil || up.Key != "artifacts/t1/"+x.ID+"/"+x.AttemptID+"/out/model.pt" {
		t.Fatalf("upload = %+v, %v", up, err)
	}
	if !strings.Contains(up.URL, "X-SHA256="+hex.EncodeToString(modelSum[:])) {
		t.Fatalf("artifact upload link %s is not bound to the file's sha256", up.URL)
	}
	size, sum := h.put(up.Key, "model")
	complete := func(arts ...app.ReportedArtifact) error {
		_, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID, Stdout: "ok", Artifacts: arts})
		return err
	}
	wantInvalid(t, "an artifact never uploaded", complete(app.ReportedArtifact{Path: "metrics.json", Size: 2}), "artifacts")
	wantInvalid(t, "an artifact of the wrong size", complete(app.ReportedArtifact{Path: "out/model.pt", Size: 4}), "artifacts")
	h.wantStatus(x.ID, domain.StatusRunning)
	if err := complete(app.ReportedArtifact{Path: "out/model.pt", Size: size, SHA256: sum}); err != nil {
		t.Fatal(err)
	}
	res, err := h.app.GetResult(h.ctx, user("t1"), x.ID)
	if err != nil || len(res.Artifacts) != 1 || res.Artifacts[0].Path != "out/model.pt" || res.Artifacts[0].Size != 5 ||
		res.Artifacts[0].SHA256 != sum || res.Artifacts[0].URL == "" || res.ExpiresIn != time.Hour || res.Task.Result.Stdout != "ok" {
		t.Fatalf("result = %+v, %v", res, err)
	}
	_, err = h.app.GetResult(h.ctx, user("t2"), x.ID)
	wantErr(t, "another tenant's result (30004)", err, domain.ErrNotFound)
}
