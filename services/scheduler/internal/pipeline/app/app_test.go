package app_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

func TestUploadStoresAFileOfItsKind(t *testing.T) {
	h := newHarness(t)
	u := h.upload(user("acme"), "ref_image", "../cats/tabby cat.png", pngImage)
	if u.Kind != domain.KindRefImage || u.Name != "tabby_cat.png" || u.Size != int64(len(pngImage)) || len(u.SHA256) != 64 ||
		!strings.HasPrefix(u.Key, "uploads/") || !strings.HasSuffix(u.Key, "/tabby_cat.png") {
		t.Fatalf("%+v", u)
	}
	if got := h.readObject(u.Key); !bytes.Equal(got, pngImage) {
		t.Errorf("stored %q", got)
	}
	if _, err := h.store.Upload(h.ctx, "other", u.Key); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant sees the upload: %v", err)
	}
}

func TestUploadRefusesBadInputAndKeepsNothing(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.UploadLimits = map[domain.Kind]int64{domain.KindModel: 100} })
	cases := []struct {
		name, kind string
		c          sched.Caller
		body       []byte
		check      func(error) bool
	}{
		{"unknown kind", "weights", user("acme"), onnxModel, func(err error) bool { return isInvalid(err, "kind") }},
		{"no kind", "", user("acme"), onnxModel, func(err error) bool { return isInvalid(err, "kind") }},
		{"not an ONNX model", "model", user("acme"), []byte("hello, I am a text file"), func(err error) bool { return isInvalid(err, "file") }},
		{"empty", "model", user("acme"), nil, func(err error) bool { return isInvalid(err, "file") }},
		{"a zip that is cut off", "quant", user("acme"), quantZip[:40], func(err error) bool { return isInvalid(err, "file") }},
		{"a gif", "ref_image", user("acme"), []byte("GIF89a......"), func(err error) bool { return isInvalid(err, "file") }},
		{"above the limit", "model", user("acme"), append(append([]byte{}, onnxModel...), make([]byte, 200)...),
			func(err error) bool {
				return errors.Is(err, app.ErrTooLarge) && strings.Contains(err.Error(), "at most 100 bytes")
			}},
		{"an operator", "model", sched.Caller{Tenant: "*", Subject: "admin"}, onnxModel, func(err error) bool { return errors.Is(err, app.ErrNoTenant) }},
	}
	for _, c := range cases {
		_, err := h.app.Upload(h.ctx, c.c, c.kind, "f", bytes.NewReader(c.body))
		if !c.check(err) {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
	if n := len(h.store.uploads); n != 0 {
		t.Errorf("%d uploads recorded", n)
	}
	if keys := h.objectKeys(); len(keys) != 0 {
		t.Errorf("objects kept: %v", keys)
	}
	// Exactly at the limit is fine.
	h.upload(user("acme"), "model", "m", append(append([]byte{}, onnxModel...), make([]byte, 100-len(onnxModel))...))
}

func (h *harness) objectKeys() []string {
	var keys []string
	for k := range h.store.uploads {
		if _, err := h.objects.Stat(h.ctx, k); err == nil {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestCreateJobCopiesInputsAndQueuesTheONNXStage(t *testing.T) {
	h := newHarness(t)
	j := h.newJob(user("acme"), "cat.png", "dog.jpg")
	if j.Status != domain.StatusONNX || j.Stage != domain.StageONNX || j.TenantID != "acme" || j.CreatedBy != "key-acme" {
		t.Fatalf("%+v", j)
	}
	if len(j.ID) != 36 || j.ID[14] != '4' {
		t.Errorf("job id %q is not a UUID v4", j.ID)
	}
	// The submission records who sent it and from where (the audit log's
	// job.created shows both).
	if rs := h.store.records[j.ID]; len(rs) == 0 || rs[0].Actor != "key-acme" || rs[0].IP != "192.0.2.10" {
		t.Errorf("the submission's record: %+v, want actor key-acme from 192.0.2.10", rs)
	}
	want := domain.Inputs{Model: "jobs/" + j.ID + "/input/model.onnx", Quant: "jobs/" + j.ID + "/input/quant.zip",
		RefImages: []string{"jobs/" + j.ID + "/input/ref_images/01-cat.png", "jobs/" + j.ID + "/input/ref_images/02-dog.jpg"}}
	if !reflect.DeepEqual(j.Inputs, want) {
		t.Errorf("inputs %+v", j.Inputs)
	}
	if !bytes.Equal(h.readObject(want.Model), onnxModel) || !bytes.Equal(h.readObject(want.Quant), quantZip) ||
		!bytes.Equal(h.readObject(want.RefImages[1]), pngImage) {
		t.Error("inputs not copied")
	}
	onnx, err := h.tasks.GetTask(h.ctx, user("acme"), j.StageTasks[domain.StageONNX])
	if err != nil {
		t.Fatalf("the onnx task: %v", err)
	}
	s := onnx.Spec
	if s.Type != task.TypeShell || s.Command != "/usr/local/bin/taskmesh" || s.Args[0] != "pipeline-stage" || s.Args[1] != "run" ||
		!slices.Equal(s.Labels, []string{"pool:onnx"}) || s.Queue != "pipeline-onnx" ||
		!reflect.DeepEqual(s.Resources, map[string]string{"taskmesh.io/pipeline-onnx": "1"}) || s.MaxRetries != 0 || s.RetryDelay != 7 ||
		onnx.CreatedBy != "pipeline" || onnx.RequestID != "pipeline/"+j.ID+"/onnx" {
		t.Errorf("onnx task %+v", onnx)
	}
	inputs := argValues(s.Args, "--input")
	if len(inputs) != 3 || !strings.HasPrefix(inputs[0], "model.onnx=") || !strings.HasPrefix(inputs[1], "ref_images/01-cat.png=") ||
		signedKey(t, strings.SplitN(inputs[0], "=", 2)[1]) != want.Model {
		t.Errorf("inputs %v", inputs)
	}
	if out := argValues(s.Args, "--output"); len(out) != 1 || signedKey(t, out[0]) != "jobs/"+j.ID+"/work/out.onnx" {
		t.Errorf("output %v", out)
	}
	if l := argValues(s.Args, "--log"); len(l) != 1 || signedKey(t, l[0]) != "jobs/"+j.ID+"/logs/onnx.log" {
		t.Errorf("log %v", l)
	}
	if p := argValues(s.Args, "--program"); p != nil {
		t.Errorf("the onnx stage runs the stand-in, got program %v", p)
	}
}

func TestCreateJobRefusesBadKeysAndCreatesNothing(t *testing.T) {
	h := newHarness(t)
	acme := user("acme")
	m := h.upload(acme, "model", "m.onnx", onnxModel)
	q := h.upload(acme, "quant", "q.zip", quantZip)
	img := h.upload(acme, "ref_image", "i.png", pngImage)
	cases := []struct {
		name  string
		req   domain.JobRequest
		c     sched.Caller
		field string
	}{
		{"no model key", domain.JobRequest{QuantKey: q.Key}, acme, "model_key"},
		{"no quant key", domain.JobRequest{ModelKey: m.Key}, acme, "quant_key"},
		{"keys swapped", domain.JobRequest{ModelKey: q.Key, QuantKey: m.Key}, acme, "model_key"},
		{"an image as quant", domain.JobRequest{ModelKey: m.Key, QuantKey: img.Key}, acme, "quant_key"},
		{"a model as ref image", domain.JobRequest{ModelKey: m.Key, QuantKey: q.Key, RefImageKeys: []string{img.Key, m.Key}}, acme, "ref_image_keys[1]"},
	}
	for _, c := range cases {
		_, err := h.app.CreateJob(h.ctx, c.c, c.req)
		if !isInvalid(err, c.field) {
			t.Errorf("%s: err = %v, want an invalid %s", c.name, err, c.field)
		}
	}
	if _, err := h.app.CreateJob(h.ctx, sched.Caller{Tenant: "*"}, domain.JobRequest{ModelKey: m.Key, QuantKey: q.Key}); !errors.Is(err, app.ErrNoTenant) {
		t.Errorf("operator: %v", err)
	}
	if n := h.store.count(); n != 0 {
		t.Errorf("%d jobs created", n)
	}
	// An upload whose object went away is refused, and what was copied
	// for the job is removed again.
	if err := h.objects.Delete(h.ctx, q.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.CreateJob(h.ctx, acme, domain.JobRequest{ModelKey: m.Key, QuantKey: q.Key}); !isInvalid(err, "keys") {
		t.Errorf("vanished upload: %v", err)
	}
	if n := h.store.count(); n != 0 {
		t.Errorf("%d jobs created", n)
	}
}

// A key that names no upload of the caller's tenant, an unknown one or
// another tenant's, is taken: the job is created and its ONNX stage
// queued, with nothing in the store where that input would be, so the
// stage fails for want of it. Another tenant's upload is neither copied
// nor marked used; the caller's own uploads in the request are.
func TestCreateJobTakesKeysThatNameNoUpload(t *testing.T) {
	h := newHarness(t)
	acme, other := user("acme"), user("other")
	m := h.upload(acme, "model", "m.onnx", onnxModel)
	q := h.upload(other, "quant", "q.zip", quantZip)
	for _, c := range []struct {
		what string
		req  domain.JobRequest
	}{
		{"an unknown model key", domain.JobRequest{ModelKey: "jobs/0b7c1d2e-0000-4000-8000-000000000001/input/model.onnx", QuantKey: q.Key,
			RefImageKeys: []string{"uploads/nope/i.png"}}},
		{"another tenant's model key", domain.JobRequest{ModelKey: m.Key, QuantKey: q.Key}},
	} {
		j, err := h.app.CreateJob(h.ctx, other, c.req)
		if err != nil || j.Status != domain.StatusONNX || j.StageTasks[domain.StageONNX] == "" {
			t.Fatalf("%s: job %+v, %v; want it created with its onnx stage queued", c.what, j, err)
		}
		if _, err := h.objects.Stat(h.ctx, j.Inputs.Model); !errors.Is(err, objectstore.ErrNotFound) {
			t.Errorf("%s: the job's model input %s: %v, want none", c.what, j.Inputs.Model, err)
		}
		if got := h.readObject(j.Inputs.Quant); !bytes.Equal(got, quantZip) {
			t.Errorf("%s: the tenant's own quant upload was not copied: %d bytes", c.what, len(got))
		}
		for _, obj := range j.Inputs.RefImages {
			if _, err := h.objects.Stat(h.ctx, obj); !errors.Is(err, objectstore.ErrNotFound) {
				t.Errorf("%s: the job's reference image %s: %v, want none", c.what, obj, err)
			}
		}
	}
	if u, err := h.store.Upload(h.ctx, "acme", m.Key); err != nil || !u.UsedAt.IsZero() {
		t.Errorf("acme's upload named by another tenant = %+v, %v; want it unused", u, err)
	}
	if u, err := h.store.Upload(h.ctx, "other", q.Key); err != nil || u.UsedAt.IsZero() {
		t.Errorf("the caller's own upload = %+v, %v; want it used", u, err)
	}
}

func TestAJobRunsThroughEveryStage(t *testing.T) {
	h := newHarness(t)
	h.run(time.Hour)
	j := h.newJob(user("acme"), "cat.png")
	outputs := map[domain.Stage][]byte{domain.StageONNX: []byte("normalised"), domain.StageBIE: []byte("bie"), domain.StageNEF: []byte("nef")}
	for _, s := range domain.Stages() {
		j = h.waitJob(j.ID, "reached "+string(s), func(j domain.Job) bool { return j.Status == s.Status() && j.StageTasks[s] != "" })
		if s == domain.StageBIE {
			bie, _ := h.tasks.GetTask(h.ctx, user("acme"), j.StageTasks[s])
			names := []string{}
			for _, in := range argValues(bie.Spec.Args, "--input") {
				names = append(names, strings.SplitN(in, "=", 2)[0])
			}
			if !slices.Equal(names, []string{"out.onnx", "quant.zip", "ref_images/01-cat.png"}) ||
				!slices.Equal(argValues(bie.Spec.Args, "--program"), []string{`["/opt/kneron/bie","{workdir}"]`}) {
				t.Errorf("bie task args %v", bie.Spec.Args)
			}
		}
		h.agentRuns(j, s, outputs[s], 0, "")
	}
	j = h.waitJob(j.ID, "completed", func(j domain.Job) bool { return j.Status == domain.StatusCompleted })
	if j.Output(domain.StageBIE) != "jobs/"+j.ID+"/output/result.bie" || j.Output(domain.StageNEF) != "jobs/"+j.ID+"/output/result.nef" ||
		j.Progress != 100 || len(j.StageTasks) != 3 {
		t.Errorf("%+v", j)
	}
	// The job is the fold of its recorded events.
	if rebuilt := domain.Fold(h.store.recordsOf(j.ID)); !reflect.DeepEqual(rebuilt, j) {
		t.Errorf("rebuilt %+v\nlive %+v", rebuilt, j)
	}
	// Downloads sign links to what exists.
	if _, err := h.objects.Put(h.ctx, domain.LogObject(j.ID, domain.StageBIE), strings.NewReader("log"), 3, ""); err != nil {
		t.Fatal(err)
	}
	l, err := h.app.Downloads(h.ctx, user("acme"), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if signedKey(t, l.NEF) != j.Output(domain.StageNEF) || signedKey(t, l.BIE) != j.Output(domain.StageBIE) ||
		signedKey(t, l.Logs[domain.StageBIE]) != domain.LogObject(j.ID, domain.StageBIE) || l.Logs[domain.StageONNX] != "" || l.TTL != time.Hour {
		t.Errorf("links %+v", l)
	}
	if _, err := h.app.Downloads(h.ctx, user("other"), j.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's downloads: %v", err)
	}
	if _, err := h.app.GetJob(h.ctx, user("other"), j.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's job: %v", err)
	}
}

func TestAFailedStageFailsTheJobWithItsReason(t *testing.T) {
	h := newHarness(t)
	h.run(time.Hour)
	j := h.newJob(user("acme"))
	h.agentRuns(j, domain.StageONNX, nil, 1, "reading model.onnx\npipeline-stage: model.onnx is not an ONNX model: field 13 has wire type 6\n")
	j = h.waitJob(j.ID, "failed", func(j domain.Job) bool { return j.Status == domain.StatusFailed })
	want := &domain.Failure{Step: domain.StageONNX, Reason: "model.onnx is not an ONNX model: field 13 has wire type 6"}
	if !reflect.DeepEqual(j.Error, want) || j.StageTasks[domain.StageBIE] != "" {
		t.Errorf("%+v", j)
	}
}

func TestAStageThatStoredNoOutputFailsTheJob(t *testing.T) {
	h := newHarness(t)
	h.run(time.Hour)
	j := h.newJob(user("acme"))
	h.agentRuns(j, domain.StageONNX, nil, 0, "")
	j = h.waitJob(j.ID, "failed", func(j domain.Job) bool { return j.Status == domain.StatusFailed })
	if j.Error.Reason != "the onnx stage ended without storing out.onnx" {
		t.Errorf("%+v", j.Error)
	}
}

func TestACancelledStageTaskFailsTheJob(t *testing.T) {
	h := newHarness(t)
	h.run(time.Hour)
	j := h.newJob(user("acme"))
	if _, err := h.tasks.CancelTask(h.ctx, user("acme"), j.StageTasks[domain.StageONNX], "changed my mind"); err != nil {
		t.Fatal(err)
	}
	j = h.waitJob(j.ID, "failed", func(j domain.Job) bool { return j.Status == domain.StatusFailed })
	if j.Error.Reason != "the onnx stage's task was cancelled" {
		t.Errorf("%+v", j.Error)
	}
}

func TestProgressOfTheStageTaskReachesTheJob(t *testing.T) {
	h := newHarness(t)
	h.run(time.Hour)
	j := h.newJob(user("acme"))
	h.onnxRunning(j, 0, 30, 30)
	h.waitJob(j.ID, "at 30%", func(j domain.Job) bool { return j.Progress == 30 && j.Message == "parsing the graph" })
}

func TestTheSweepCatchesUpOnWhatWasNotObserved(t *testing.T) {
	h := newHarness(t)
	// No process manager: changes are observed but nobody applies them,
	// as when the scheduler crashed right after committing them.
	j := h.newJob(user("acme"))
	h.agentRuns(j, domain.StageONNX, []byte("out"), 0, "")
	if got := h.job(j.ID); got.Status != domain.StatusONNX {
		t.Fatalf("moved on without the process manager: %+v", got)
	}
	n, err := h.app.Reconcile(h.ctx)
	if err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v", n, err)
	}
	j = h.job(j.ID)
	if j.Status != domain.StatusBIE || j.StageTasks[domain.StageBIE] == "" {
		t.Fatalf("%+v", j)
	}
	// Again: nothing to do.
	if n, err := h.app.Reconcile(h.ctx); err != nil || n != 0 {
		t.Errorf("second Reconcile = %d, %v", n, err)
	}
}

func TestTheSweepQueuesAStageRecordedWithoutItsTask(t *testing.T) {
	h := newHarness(t)
	// A job recorded just before a crash: no stage task yet.
	j, err := h.store.Create(h.ctx, domain.Submit(time.Now(), "00000000-0000-4000-8000-00000000000a", "acme", "key-acme", "",
		domain.Inputs{Model: "jobs/x/input/model.onnx", Quant: "jobs/x/input/quant.zip"}, domain.InputKeys{}))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.app.Reconcile(h.ctx); err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v", n, err)
	}
	j = h.job(j.ID)
	first := j.StageTasks[domain.StageONNX]
	if first == "" {
		t.Fatalf("%+v", j)
	}
	// Queueing the same stage again finds the same task (its request id).
	created, err := h.tasks.CreateTasks(h.ctx, user("acme"), task.SpecInput{Name: "x", Command: "true"}, domain.StageRequestID(j.ID, domain.StageONNX))
	if err != nil || created[0].ID != first {
		t.Errorf("stage request id made a second task: %v %v", created, err)
	}
}

func TestTasksOfOthersAreIgnored(t *testing.T) {
	h := newHarness(t)
	h.run(time.Hour)
	j := h.newJob(user("acme"))
	// A client names a stage's request id on a task of its own: the
	// pipeline did not create it, so it moves nothing.
	forged, err := h.tasks.CreateTasks(h.ctx, user("acme"), task.SpecInput{Name: "forged", Type: task.TypeNoop},
		"pipeline/"+j.ID+"/bie")
	if err != nil {
		t.Fatal(err)
	}
	h.app.Observe(task.Task{ID: forged[0].ID, CreatedBy: "key-acme", RequestID: "pipeline/" + j.ID + "/onnx", Status: task.StatusCompleted})
	h.app.Observe(task.Task{ID: "x", CreatedBy: "pipeline", RequestID: "pipeline/" + j.ID + "/onnx", Status: task.StatusCompleted})
	if n, err := h.app.Reconcile(h.ctx); err != nil || n != 0 {
		t.Errorf("Reconcile = %d, %v", n, err)
	}
	if got := h.job(j.ID); got.Status != domain.StatusONNX || got.Version != j.Version {
		t.Errorf("moved by a foreign task: %+v", got)
	}
}

func TestAStageTheSchedulerRefusesFailsTheJob(t *testing.T) {
	h := newHarness(t, func(c *app.Config) {
		c.Stages = map[domain.Stage]app.StageConfig{domain.StageONNX: {Timeout: 10 * 86400}}
	})
	j := h.newJob(user("acme"))
	if j.Status != domain.StatusFailed || j.Error.Step != domain.StageONNX || !strings.Contains(j.Error.Reason, "could not be queued") {
		t.Errorf("%+v", j)
	}
}

// The next stage's task is created before the stage's end is recorded. A
// crash in between (here: the job's write fails) leaves the job in its
// stage with its task completed; applying that again (the sweep) finds
// the task already created and records both.
func TestAStageEndLostBeforeItsRecordFindsTheNextTaskCreated(t *testing.T) {
	h := newHarness(t)
	j := h.newJob(user("acme"))
	h.agentRuns(j, domain.StageONNX, []byte("onnx"), 0, "")
	h.store.failWrite = func(rs []domain.Record) error {
		h.store.failWrite = nil // once (called under the store's lock)
		return errors.New("the scheduler crashed")
	}
	if n, _ := h.app.Reconcile(h.ctx); n != 0 {
		t.Fatalf("Reconcile with the write lost moved %d jobs", n)
	}
	if got := h.job(j.ID); got.Status != domain.StatusONNX || got.StageTasks[domain.StageBIE] != "" {
		t.Fatalf("the lost write was recorded: %+v", got)
	}
	created := h.stageTasks(j.ID, domain.StageBIE)
	if len(created) != 1 {
		t.Fatalf("BIE tasks created before the job's write: %v, want one", created)
	}
	if n, err := h.app.Reconcile(h.ctx); err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v", n, err)
	}
	got := h.job(j.ID)
	if got.Status != domain.StatusBIE || got.StageTasks[domain.StageBIE] != created[0] {
		t.Fatalf("after the sweep: %+v, want BIE with task %s", got, created[0])
	}
	var ends, queued int
	for _, r := range h.store.recordsOf(j.ID) {
		switch r.Event.(type) {
		case domain.StageSucceeded:
			ends++
		case domain.StageQueued:
			queued++
		}
	}
	if ends != 1 || queued != 2 { // ONNX's and BIE's
		t.Errorf("recorded %d stage ends and %d queued stages, want 1 and 2", ends, queued)
	}
	if all := h.stageTasks(j.ID, domain.StageBIE); len(all) != 1 {
		t.Errorf("BIE tasks created: %v, want the one", all)
	}
}

// A job's hand-off does not wait for another job's: changes are applied in
// order per job, jobs side by side.
func TestAJobMovesOnBesideAStuckHandOff(t *testing.T) {
	release := make(chan struct{})
	stuck := &stuckStat{release: release}
	h := newHarness(t, func(c *app.Config) {
		stuck.Store = c.Objects
		c.Objects = stuck
	})
	a := h.newJob(user("acme"))
	stuck.key = domain.OutputObject(a.ID, domain.StageONNX)
	h.run(time.Hour)
	h.agentRuns(a, domain.StageONNX, []byte("a"), 0, "")
	b := h.newJob(user("acme"))
	h.agentRuns(b, domain.StageONNX, []byte("b"), 0, "")
	h.waitJob(b.ID, "in BIE", func(j domain.Job) bool { return j.Status == domain.StatusBIE && j.StageTasks[domain.StageBIE] != "" })
	if got := h.job(a.ID); got.Status != domain.StatusONNX {
		t.Fatalf("a moved on while its hand-off was stuck: %+v", got)
	}
	close(release)
	h.waitJob(a.ID, "in BIE", func(j domain.Job) bool { return j.Status == domain.StatusBIE && j.StageTasks[domain.StageBIE] != "" })
}

// stuckStat is an object store whose Stat of key waits for release.
type stuckStat struct {
	objectstore.Store
	key     string
	release chan struct{}
}

func (s *stuckStat) Stat(ctx context.Context, key string) (objectstore.Info, error) {
	if key == s.key {
		select {
		case <-s.release:
		case <-ctx.Done():
			return objectstore.Info{}, ctx.Err()
		}
	}
	return s.Store.Stat(ctx, key)
}

// A next stage the scheduler refuses fails the job there, with the stage
// before it recorded as done.
func TestANextStageTheSchedulerRefusesFailsTheJob(t *testing.T) {
	h := newHarness(t, func(c *app.Config) {
		bie := c.Stages[domain.StageBIE]
		bie.Timeout = 10 * 86400
		c.Stages[domain.StageBIE] = bie
	})
	h.run(time.Hour)
	j := h.newJob(user("acme"))
	h.agentRuns(j, domain.StageONNX, []byte("onnx"), 0, "")
	got := h.waitJob(j.ID, "failed", func(j domain.Job) bool { return j.Status == domain.StatusFailed })
	if got.Error.Step != domain.StageBIE || !strings.Contains(got.Error.Reason, "could not be queued") ||
		got.Output(domain.StageONNX) != domain.OutputObject(j.ID, domain.StageONNX) {
		t.Errorf("%+v", got)
	}
}

// A reference image is read whole and judged by Config.CheckImage before
// anything is stored; the body stored is the one judged, and one above
// the limit is refused as too large without being judged.
func TestUploadJudgesAReferenceImageWhole(t *testing.T) {
	var judged []int
	h := newHarness(t, func(c *app.Config) {
		c.UploadLimits = map[domain.Kind]int64{domain.KindRefImage: 200 << 10}
		c.CheckImage = func(b []byte) error {
			judged = append(judged, len(b))
			if !bytes.HasSuffix(b, []byte("IEND")) {
				return domain.Invalid("file", "is not a whole png image: unexpected EOF")
			}
			return nil
		}
	})
	// Larger than the peek at its start, so the whole of it must be read.
	whole := append(append(bytes.Clone(pngImage), make([]byte, 150<<10)...), "IEND"...)
	u := h.upload(user("acme"), "ref_image", "whole.png", whole)
	if stored := h.readObject(u.Key); !bytes.Equal(stored, whole) {
		t.Fatalf("stored %d bytes, want the %d judged", len(stored), len(whole))
	}
	if _, err := h.app.Upload(h.ctx, user("acme"), "ref_image", "cut.png", bytes.NewReader(whole[:len(whole)-4])); !isInvalid(err, "file") ||
		!strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("a cut image: %v, want the checker's reason", err)
	}
	if _, err := h.app.Upload(h.ctx, user("acme"), "ref_image", "big.png", bytes.NewReader(append(bytes.Clone(whole), make([]byte, 60<<10)...))); !errors.Is(err, app.ErrTooLarge) {
		t.Errorf("an image above the limit: %v, want ErrTooLarge", err)
	}
	if want := []int{len(whole), len(whole) - 4}; !slices.Equal(judged, want) {
		t.Errorf("judged bodies of %v bytes, want %v", judged, want)
	}
	if n := len(h.store.uploads); n != 1 {
		t.Errorf("%d uploads recorded, want the whole image's only", n)
	}
}

// What the observed changes record while the sweep goes through the jobs
// it read is theirs: the sweep counts only what it recorded itself, so
// that its report ("moved jobs on") says it caught up on something.
func TestTheSweepCountsOnlyWhatItRecorded(t *testing.T) {
	h := newHarness(t)
	// No process manager: the stage task's progress is not applied.
	j := h.newJob(user("acme"))
	id := h.onnxRunning(j, 0, 30)
	// The observed path records the progress right after the sweep read
	// the job.
	h.store.afterActive = func() {
		h.store.afterActive = nil
		if _, err := h.store.Mutate(h.ctx, j.ID, func(j domain.Job) ([]domain.Record, error) {
			return j.ReportProgress(time.Now(), "pipeline", domain.StageONNX, id, 30, "parsing the graph"), nil
		}); err != nil {
			t.Error(err)
		}
	}
	if n, err := h.app.Reconcile(h.ctx); err != nil || n != 0 {
		t.Fatalf("Reconcile after the observed path recorded the progress = %d, %v; want 0", n, err)
	}
	if got := h.job(j.ID); got.Progress != 30 || got.Version != j.Version+1 {
		t.Fatalf("job = progress %d version %d, want 30 at version %d (one record)", got.Progress, got.Version, j.Version+1)
	}

	// Nobody else got there: the sweep's own record counts.
	h.onnxRunning(j, 60)
	if n, err := h.app.Reconcile(h.ctx); err != nil || n != 1 {
		t.Fatalf("Reconcile of unapplied progress = %d, %v; want 1", n, err)
	}
	if got := h.job(j.ID); got.Progress != 60 || got.Message != "parsing the graph" {
		t.Fatalf("job progress %d %q, want 60", got.Progress, got.Message)
	}
}
