package app

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// fakeTasks stands in for the scheduler's use cases.
type fakeTasks struct {
	created   []task.SpecInput
	createErr error
	tasks     map[string]task.Task
	listed    []task.Task
}

func (f *fakeTasks) CreateTasks(_ context.Context, c sched.Caller, in task.SpecInput, _ string) ([]task.Task, error) {
	if f.createErr != nil {
		return nil, f.createErr
	}
	f.created = append(f.created, in)
	spec, err := task.NormalizeSpec(in)
	if err != nil {
		return nil, err
	}
	return []task.Task{{ID: "task-1", TenantID: c.Tenant, Spec: spec}}, nil
}

func (f *fakeTasks) GetTask(_ context.Context, _ sched.Caller, id string) (task.Task, error) {
	t, ok := f.tasks[id]
	if !ok {
		return task.Task{}, task.ErrNotFound
	}
	return t, nil
}

func (f *fakeTasks) ChangeTask(_ context.Context, _ sched.Caller, id string, decide func(task.Task, time.Time) ([]task.Record, error)) (task.Task, error) {
	t, ok := f.tasks[id]
	if !ok {
		return task.Task{}, task.ErrNotFound
	}
	recs, err := decide(t, t0)
	if err != nil {
		return t, err
	}
	for _, r := range recs {
		t = task.Apply(t, r)
	}
	f.tasks[id] = t
	return t, nil
}

func (f *fakeTasks) VideoTasksCreatedBefore(context.Context, time.Time, int) ([]task.Task, error) {
	return f.listed, nil
}

// fakeObjects records puts and deletes; failPut makes Put fail.
type fakeObjects struct {
	objectstore.Store
	puts, deletes []string
	failPut       bool
	signedFor     map[string]time.Duration // by key, the last PresignGet's ttl
}

func (o *fakeObjects) Put(_ context.Context, key string, body io.Reader, _ int64, _ string) (objectstore.Info, error) {
	if o.failPut {
		return objectstore.Info{}, errors.New("disk full")
	}
	_, _ = io.Copy(io.Discard, body)
	o.puts = append(o.puts, key)
	return objectstore.Info{}, nil
}

func (o *fakeObjects) PresignGet(_ context.Context, key string, ttl time.Duration) (string, error) {
	if o.signedFor == nil {
		o.signedFor = map[string]time.Duration{}
	}
	o.signedFor[key] = ttl
	return "http://objects/" + key, nil
}

func (o *fakeObjects) Delete(_ context.Context, key string) error {
	o.deletes = append(o.deletes, key)
	return nil
}

type fakeFrames struct{}

// Load refuses an image whose address says "broken", as a frame that does
// not decode is refused.
func (fakeFrames) Load(_ context.Context, image string) ([]byte, domain.ImageInfo, error) {
	if strings.Contains(image, "broken") {
		return nil, domain.ImageInfo{}, &domain.InvalidError{Field: "input.image", Reason: "could not be decoded"}
	}
	return []byte("png"), domain.ImageInfo{Format: domain.FormatPNG, Width: 800, Height: 600, Bytes: 3}, nil
}

type failingRewriter struct{}

func (failingRewriter) Rewrite(context.Context, string) (string, error) {
	return "", errors.New("no model")
}

type upperRewriter struct{}

func (upperRewriter) Rewrite(_ context.Context, p string) (string, error) {
	return strings.ToUpper(p), nil
}

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

func newApp(t *testing.T, tasks *fakeTasks, objects objectstore.Store, rw Rewriter) *App {
	t.Helper()
	c, err := domain.NewCatalog(domain.DefaultModels())
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Tasks: tasks, Catalog: c, Routing: domain.Routing{Routes: domain.DefaultRoutes(), Default: "standard"},
		Objects: objects, Frames: fakeFrames{}, Rewriter: rw, Now: func() time.Time { return t0 }, Seed: func() int { return 7 }})
}

var caller = sched.Caller{Tenant: "acme", Subject: "user", Tier: "premium"}

func i2v() domain.Request {
	return domain.Request{Model: "wan2.2-i2v", Prompt: "a cat", Image: "https://example.com/cat.png"}
}

func TestCreateMapsThePlanOntoATask(t *testing.T) {
	tasks, objects := &fakeTasks{}, &fakeObjects{}
	a := newApp(t, tasks, objects, upperRewriter{})
	created, err := a.Create(context.Background(), caller, i2v())
	if err != nil {
		t.Fatal(err)
	}
	in := tasks.created[0]
	v := in.Video
	if *in.Priority != 2 || in.Queue != "tenant-high-priority-queue" || *in.MaxRetries != 0 || in.Resources["nvidia.com/gpu"] != "2" ||
		v.ActualPrompt != "A CAT" || v.Seed != 7 || v.Width != 736 || v.Height != 544 || v.FrameNum != 81 ||
		v.ImageURL != "http://objects/"+v.ImageObjectKey || len(objects.puts) != 1 || objects.puts[0] != v.ImageObjectKey {
		t.Errorf("spec = %+v, video = %+v, puts %v", in, v, objects.puts)
	}
	if created.ID != "task-1" {
		t.Errorf("created = %+v", created)
	}
}

type longRewriter struct{}

func (longRewriter) Rewrite(_ context.Context, p string) (string, error) {
	return strings.Repeat("长", 900), nil
}

func TestCreateCutsTheRewrittenPrompt(t *testing.T) {
	tasks := &fakeTasks{}
	if _, err := newApp(t, tasks, nil, longRewriter{}).Create(context.Background(), caller, domain.Request{Model: "wan2.2-t2v", Prompt: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := len([]rune(tasks.created[0].Video.ActualPrompt)); n != domain.MaxPromptChars {
		t.Errorf("actual prompt has %d characters", n)
	}
}

func TestCreateFailuresStoreNothing(t *testing.T) {
	ctx := context.Background()
	// The rewriter fails: nothing stored, nothing created.
	tasks, objects := &fakeTasks{}, &fakeObjects{}
	if _, err := newApp(t, tasks, objects, failingRewriter{}).Create(ctx, caller, i2v()); err == nil || len(objects.puts) != 0 || len(tasks.created) != 0 {
		t.Errorf("rewriter failure: %v, puts %v", err, objects.puts)
	}
	// The store fails.
	objects = &fakeObjects{failPut: true}
	if _, err := newApp(t, tasks, objects, upperRewriter{}).Create(ctx, caller, i2v()); err == nil || len(tasks.created) != 0 {
		t.Errorf("store failure: %v", err)
	}
	// The task cannot be created: the stored frame is removed again.
	tasks, objects = &fakeTasks{createErr: errors.New("database down")}, &fakeObjects{}
	if _, err := newApp(t, tasks, objects, upperRewriter{}).Create(ctx, caller, i2v()); err == nil ||
		len(objects.puts) != 1 || len(objects.deletes) != 1 || objects.deletes[0] != objects.puts[0] {
		t.Errorf("create failure: %v, puts %v, deletes %v", err, objects.puts, objects.deletes)
	}
	// No object store: image_to_video is unavailable, text_to_video works.
	tasks = &fakeTasks{}
	a := newApp(t, tasks, nil, upperRewriter{})
	if _, err := a.Create(ctx, caller, i2v()); !errors.Is(err, ErrNoObjectStore) {
		t.Errorf("without a store: %v", err)
	}
	if _, err := a.Create(ctx, caller, domain.Request{Model: "wan2.2-t2v", Prompt: "x"}); err != nil {
		t.Errorf("text_to_video without a store: %v", err)
	}
	// An admin has no tenant to submit for.
	if _, err := a.Create(ctx, sched.Caller{Tenant: "*"}, domain.Request{Model: "wan2.2-t2v", Prompt: "x"}); !errors.Is(err, ErrNoTenant) {
		t.Errorf("admin: %v", err)
	}
	// Invalid input never reaches the tasks.
	var inv *domain.InvalidError
	if _, err := a.Create(ctx, caller, domain.Request{Model: "wan2.2-t2v"}); !errors.As(err, &inv) || len(tasks.created) != 1 {
		t.Errorf("invalid request: %v", err)
	}
}

func TestFailure(t *testing.T) {
	tests := map[string][2]string{
		"InvalidParameter: The size is not match": {"InvalidParameter", "The size is not match"},
		"DataInspectionFailed.Output: unsafe":     {"DataInspectionFailed.Output", "unsafe"},
		"exit code 137":                           {"InternalError", "exit code 137"},
		"":                                        {"InternalError", "the generation failed"},
	}
	for text, want := range tests {
		if code, msg := failure(text); code != want[0] || msg != want[1] {
			t.Errorf("failure(%q) = %q, %q", text, code, msg)
		}
	}
}

// A video's link ends with its generation, 24 hours after the
// submission, however late it is asked for: the sweeper removes the video
// then.
func TestVideoLinkEndsWithTheGeneration(t *testing.T) {
	done := task.Task{ID: "done", TenantID: "acme", Status: task.StatusCompleted, CreatedAt: t0.Add(-20 * time.Hour),
		Spec: task.Spec{Type: task.TypeVideo, Video: &task.Video{}}, Result: &task.Result{ObjectKey: "results/acme/done/a.mp4"}}
	objects := &fakeObjects{}
	v, err := newApp(t, &fakeTasks{tasks: map[string]task.Task{"done": done}}, objects, upperRewriter{}).Get(context.Background(), caller, "done")
	if err != nil || v.Status != domain.StatusSucceeded || v.VideoURL == "" {
		t.Fatalf("Get = %+v, %v", v, err)
	}
	if got := objects.signedFor["results/acme/done/a.mp4"]; got != 4*time.Hour {
		t.Errorf("the link is signed for %s, want the 4h the generation has left", got)
	}
	if d := domain.Remaining(done, t0.Add(5*time.Hour)); d != 0 {
		t.Errorf("Remaining after the retention = %s, want 0", d)
	}
}

func TestSweepExpiresAndRemovesObjects(t *testing.T) {
	old := task.Task{ID: "old", TenantID: "acme", Status: task.StatusCompleted, CreatedAt: t0.Add(-25 * time.Hour),
		Spec:   task.Spec{Type: task.TypeVideo, Video: &task.Video{ImageObjectKey: "video-inputs/acme/x.png"}},
		Result: &task.Result{ObjectKey: "results/acme/old/a.mp4"}}
	gone := task.Task{ID: "gone", TenantID: "acme", Deleted: true, Status: task.StatusCancelled}
	tasks := &fakeTasks{tasks: map[string]task.Task{"old": old, "gone": gone}, listed: []task.Task{old, gone, {ID: "missing"}}}
	objects := &fakeObjects{}
	n, err := newApp(t, tasks, objects, upperRewriter{}).Sweep(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if !tasks.tasks["old"].Deleted || strings.Join(objects.deletes, ",") != "video-inputs/acme/x.png,results/acme/old/a.mp4" {
		t.Errorf("after the sweep: %+v, deletes %v", tasks.tasks["old"], objects.deletes)
	}
}

// A text_to_video that carries an image has it checked, then makes the
// same task as one without: nothing stored, no first frame, the
// text_to_video's size.
func TestTextToVideoChecksAnImageItDoesNotUse(t *testing.T) {
	ctx := context.Background()
	tasks, objects := &fakeTasks{}, &fakeObjects{}
	a := newApp(t, tasks, objects, upperRewriter{})
	if _, err := a.Create(ctx, caller, domain.Request{Model: "wan2.2-t2v", Prompt: "x", Image: "https://example.com/cat.png"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, caller, domain.Request{Model: "wan2.2-t2v", Prompt: "x"}); err != nil {
		t.Fatal(err)
	}
	with, without := tasks.created[0].Video, tasks.created[1].Video
	if with.ImageURL != "" || with.ImageObjectKey != "" || len(objects.puts) != 0 {
		t.Errorf("the image was kept: %+v, puts %v", with, objects.puts)
	}
	if with.Width != without.Width || with.Height != without.Height || with.Type != domain.TextToVideo {
		t.Errorf("with an image %dx%d %s, without %dx%d", with.Width, with.Height, with.Type, without.Width, without.Height)
	}
	var inv *domain.InvalidError
	_, err := a.Create(ctx, caller, domain.Request{Model: "wan2.2-t2v", Prompt: "x", Image: "https://example.com/broken.png"})
	if !errors.As(err, &inv) || inv.Field != "input.image" || len(tasks.created) != 2 {
		t.Errorf("a text_to_video with a bad image = %v; %d tasks created", err, len(tasks.created))
	}
}
