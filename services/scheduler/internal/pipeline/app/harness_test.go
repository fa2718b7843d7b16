package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// The pipeline's use cases run here on the scheduler's own use cases
// (over the scheduler's in-memory store fake), a recording fake of the
// job and upload stores, and a real filesystem object store. Agents are
// played by claiming and completing stage tasks through the scheduler.

// jobStore is a recording in-memory app.JobStore and app.UploadStore: it
// folds records with domain.Apply like the Postgres store and keeps every
// record, so a test can rebuild jobs from them.
type jobStore struct {
	mu      sync.Mutex
	jobs    map[string]domain.Job
	records map[string][]domain.Record
	uploads map[string]app.Upload
	purged  map[string]bool
	calls   []string
	// failWrite, when set, is asked before each Mutate stores records; an
	// error fails that write (a crash before the job's commit).
	failWrite func(rs []domain.Record) error
	// afterActive, when set, runs once Active has answered (what another
	// path records while the sweep goes through the jobs it read).
	afterActive func()
}

func newJobStore() *jobStore {
	return &jobStore{jobs: map[string]domain.Job{}, records: map[string][]domain.Record{}, uploads: map[string]app.Upload{}, purged: map[string]bool{}}
}

func (s *jobStore) Create(_ context.Context, rs []domain.Record) (domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := domain.Fold(rs)
	if _, ok := s.jobs[j.ID]; ok {
		return domain.Job{}, fmt.Errorf("job %s exists", j.ID)
	}
	s.jobs[j.ID], s.records[j.ID] = j, append([]domain.Record(nil), rs...)
	s.calls = append(s.calls, "Create "+j.ID)
	return j, nil
}

func (s *jobStore) Get(_ context.Context, tenant, id string) (domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok || (tenant != "*" && j.TenantID != tenant) {
		return domain.Job{}, domain.ErrNotFound
	}
	return j, nil
}

func (s *jobStore) Mutate(_ context.Context, id string, decide func(domain.Job) ([]domain.Record, error)) (domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return domain.Job{}, domain.ErrNotFound
	}
	rs, err := decide(j)
	if err != nil {
		return domain.Job{}, err
	}
	if s.failWrite != nil && len(rs) > 0 {
		if err := s.failWrite(rs); err != nil {
			return domain.Job{}, err
		}
	}
	for _, r := range rs {
		j = domain.Apply(j, r)
	}
	s.jobs[id], s.records[id] = j, append(s.records[id], rs...)
	return j, nil
}

func (s *jobStore) Active(_ context.Context, after string, limit int) ([]domain.Job, error) {
	s.mu.Lock()
	var out []domain.Job
	for _, j := range s.jobs {
		if !j.Status.Final() && j.ID > after {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b domain.Job) int { return strings.Compare(a.ID, b.ID) })
	f := s.afterActive
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return out[:min(limit, len(out))], nil
}

func (s *jobStore) SaveUpload(_ context.Context, u app.Upload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uploads[u.Key] = u
	return nil
}

func (s *jobStore) Upload(_ context.Context, tenant, key string) (app.Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.uploads[key]
	if !ok || u.TenantID != tenant {
		return app.Upload{}, domain.ErrNotFound
	}
	return u, nil
}

func (s *jobStore) UseUploads(_ context.Context, tenant string, keys []string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		u, ok := s.uploads[k]
		if !ok || u.TenantID != tenant || !u.ExpiredAt.IsZero() {
			return &app.UploadExpiredError{Key: k}
		}
		if u.UsedAt.IsZero() {
			u.UsedAt = at
			s.uploads[k] = u
		}
	}
	s.calls = append(s.calls, "UseUploads "+strings.Join(keys, " "))
	return nil
}

func (s *jobStore) ExpireUploads(_ context.Context, cutoff, at time.Time, limit int) ([]app.Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []app.Upload
	for k, u := range s.uploads {
		if u.UsedAt.IsZero() && u.ExpiredAt.IsZero() && u.CreatedAt.Before(cutoff) {
			u.ExpiredAt = at
			s.uploads[k] = u
		}
	}
	for k, u := range s.uploads {
		if !u.ExpiredAt.IsZero() && !s.purged[k] && len(out) < limit {
			out = append(out, u)
		}
	}
	return out, nil
}

func (s *jobStore) UploadsPurged(_ context.Context, keys []string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.purged[k] = true
	}
	return nil
}

func (s *jobStore) recordsOf(id string) []domain.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]domain.Record(nil), s.records[id]...)
}

func (s *jobStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}

type harness struct {
	t       *testing.T
	ctx     context.Context
	tasks   *sched.App
	tstore  *apptest.Store // the scheduler's
	store   *jobStore
	objects *objectstore.FS
	app     *app.App
	cfg     app.Config
}

func newHarness(t *testing.T, opts ...func(*app.Config)) *harness {
	t.Helper()
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects",
		Secret: []byte(strings.Repeat("s", objectstore.MinSecretLen)), MaxPutBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	hub := sched.NewHub()
	onnxRetryDelay := 7
	tstore := apptest.NewStore()
	tasks := sched.New(tstore.Stores(), objects, time.Now, hub, sched.Config{}, nil)
	h := &harness{t: t, ctx: context.Background(), tasks: tasks, tstore: tstore, store: newJobStore(), objects: objects}
	h.cfg = app.Config{Tasks: tasks, Jobs: h.store, Uploads: h.store, Objects: objects,
		Worker: []string{"/usr/local/bin/taskmesh", "pipeline-stage"},
		Stages: map[domain.Stage]app.StageConfig{
			domain.StageONNX: {Queue: "pipeline-onnx", Resource: "taskmesh.io/pipeline-onnx", RetryDelay: &onnxRetryDelay},
			domain.StageBIE:  {Queue: "pipeline-bie", Resource: "taskmesh.io/pipeline-bie", Program: []string{"/opt/kneron/bie", "{workdir}"}},
			domain.StageNEF:  {Labels: []string{"pool:nef", "gpu:none"}, Timeout: 60, Retries: 1},
		}}
	for _, o := range opts {
		o(&h.cfg)
	}
	h.app = app.New(h.cfg)
	hub.Observe(h.app.Observe)
	return h
}

// run starts the process manager (sweeping every interval) until the test
// ends.
func (h *harness) run(interval time.Duration) {
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { h.app.Run(ctx, interval); close(done) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

func user(tenant string) sched.Caller {
	return sched.Caller{Tenant: tenant, Subject: "key-" + tenant, IP: "192.0.2.10", Tier: "standard"}
}

// Files good enough for each kind's check.
var (
	onnxModel = []byte("\x08\x07\x12\x07pytorch\x3a\x00")
	quantZip  = []byte("PK\x03\x04" + strings.Repeat("\x00", 26) + "PK\x05\x06" + strings.Repeat("\x00", 18))
	pngImage  = []byte("\x89PNG\r\n\x1a\n" + "rest of the image")
)

func (h *harness) upload(c sched.Caller, kind, name string, body []byte) app.Upload {
	h.t.Helper()
	u, err := h.app.Upload(h.ctx, c, kind, name, bytes.NewReader(body))
	if err != nil {
		h.t.Fatalf("upload %s: %v", kind, err)
	}
	return u
}

// newJob uploads a model and a quant archive and creates a job on them.
func (h *harness) newJob(c sched.Caller, refImages ...string) domain.Job {
	h.t.Helper()
	m := h.upload(c, "model", "resnet.onnx", onnxModel)
	q := h.upload(c, "quant", "quant.zip", quantZip)
	var refs []string
	for _, name := range refImages {
		refs = append(refs, h.upload(c, "ref_image", name, pngImage).Key)
	}
	j, err := h.app.CreateJob(h.ctx, c, domain.JobRequest{ModelKey: m.Key, QuantKey: q.Key, RefImageKeys: refs})
	if err != nil {
		h.t.Fatalf("create job: %v", err)
	}
	return j
}

// job reads a job as the store has it.
func (h *harness) job(id string) domain.Job {
	h.t.Helper()
	j, err := h.store.Get(h.ctx, "*", id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

// waitJob waits until cond holds for job id (the process manager works
// in the background).
func (h *harness) waitJob(id string, what string, cond func(domain.Job) bool) domain.Job {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		j := h.job(id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s never %s: %+v", id, what, j)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// agentRuns claims the job's stage task as an agent of the pool, starts it
// and finishes it: out is written to the stage's output object unless nil,
// and the task ends with exit code and stderr.
func (h *harness) agentRuns(j domain.Job, s domain.Stage, out []byte, exit int, stderr string) task.Task {
	h.t.Helper()
	id := j.StageTasks[s]
	if id == "" {
		h.t.Fatalf("job %s has no %s task: %+v", j.ID, s, j)
	}
	agentID := "agent-" + string(s)
	agent := sched.Caller{Tenant: "*", Subject: "agent:" + agentID, AgentID: agentID}
	claimed, _, err := h.tasks.ClaimTasks(h.ctx, agent, sched.ClaimRequest{AgentID: agentID, MachineID: "m1",
		Labels: []string{"pool:" + string(s), "gpu:none"}, Limit: 10})
	if err != nil {
		h.t.Fatal(err)
	}
	var leased task.Task
	for _, t := range claimed {
		if t.ID == id {
			leased = t
		}
	}
	if leased.ID == "" {
		h.t.Fatalf("the %s agent could not claim %s (got %d tasks)", s, id, len(claimed))
	}
	if _, err := h.tasks.ChangeTask(h.ctx, agent, id, func(t task.Task, now time.Time) ([]task.Record, error) {
		return t.Start(now, agentID, t.AttemptID)
	}); err != nil {
		h.t.Fatal(err)
	}
	if out != nil {
		if _, err := h.objects.Put(h.ctx, domain.OutputObject(j.ID, s), bytes.NewReader(out), int64(len(out)), ""); err != nil {
			h.t.Fatal(err)
		}
	}
	done, err := h.tasks.ChangeTask(h.ctx, agent, id, func(t task.Task, now time.Time) ([]task.Record, error) {
		rs, _, err := t.Complete(now, agentID, t.AttemptID, task.Outcome{ExitCode: exit,
			Result: &task.Result{StorageType: "db", Stderr: stderr}})
		return rs, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return done
}

// readObject reads a whole object.
func (h *harness) readObject(key string) []byte {
	h.t.Helper()
	r, _, err := h.objects.Open(h.ctx, key)
	if err != nil {
		h.t.Fatalf("open %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// argValues returns the values of every "--flag value" pair in args.
func argValues(args []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			out = append(out, args[i+1])
		}
	}
	return out
}

// signedKey is the object key a presigned FS URL names.
func signedKey(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/objects/")
}

func isInvalid(err error, field string) bool {
	var ie *domain.InvalidError
	return errors.As(err, &ie) && ie.Field == field
}

// stageTasks returns the ids of the tasks created for job's stage s, in
// creation order.
func (h *harness) stageTasks(jobID string, s domain.Stage) []string {
	var out []string
	for _, e := range h.tstore.Events() {
		if sub, ok := e.Record.Event.(task.Submitted); ok && sub.RequestID == domain.StageRequestID(jobID, s) {
			out = append(out, e.TaskID)
		}
	}
	return out
}

// onnxRunning plays agent "a" on job j's ONNX stage task: it claims the
// task unless it runs already, starts it, and reports each of progress
// ("parsing the graph"). It returns the task's id.
func (h *harness) onnxRunning(j domain.Job, progress ...int) string {
	h.t.Helper()
	id := j.StageTasks[domain.StageONNX]
	agent := sched.Caller{Tenant: "*", Subject: "agent:a", AgentID: "a"}
	if cur, err := h.tasks.GetTask(h.ctx, agent, id); err != nil {
		h.t.Fatal(err)
	} else if cur.Status == task.StatusPending {
		if _, _, err := h.tasks.ClaimTasks(h.ctx, agent, sched.ClaimRequest{AgentID: "a", MachineID: "m", Labels: []string{"pool:onnx"}}); err != nil {
			h.t.Fatal(err)
		}
	}
	for _, p := range progress {
		if _, err := h.tasks.ChangeTask(h.ctx, agent, id, func(t task.Task, now time.Time) ([]task.Record, error) {
			if t.Status == task.StatusAssigned {
				return t.Start(now, "a", t.AttemptID)
			}
			return t.ReportProgress(now, "a", t.AttemptID, p, "parsing the graph")
		}); err != nil {
			h.t.Fatal(err)
		}
	}
	return id
}
