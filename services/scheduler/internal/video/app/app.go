// Package app holds the video API's use cases: create, get and delete a
// generation, and the retention sweep. A generation is a scheduler task of
// type video, created and read through the scheduler's own use cases in
// the same process, so a client reads its writes at once and the
// scheduler's rules (events, leases, preemption, admission) apply unchanged.
package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// Tasks is the part of the scheduler's use cases the video API needs.
type Tasks interface {
	CreateTasks(ctx context.Context, c sched.Caller, in task.SpecInput, requestID string) ([]task.Task, error)
	GetTask(ctx context.Context, c sched.Caller, id string) (task.Task, error)
	ChangeTask(ctx context.Context, c sched.Caller, id string, decide func(t task.Task, now time.Time) ([]task.Record, error)) (task.Task, error)
	VideoTasksCreatedBefore(ctx context.Context, before time.Time, limit int) ([]task.Task, error)
}

// Frames loads a first frame (frames.Loader).
type Frames interface {
	Load(ctx context.Context, image string) ([]byte, domain.ImageInfo, error)
}

// Rewriter rewrites a prompt for prompt_extend (package rewrite).
type Rewriter interface {
	Rewrite(ctx context.Context, prompt string) (string, error)
}

// Config wires the use cases.
type Config struct {
	Tasks   Tasks
	Catalog domain.Catalog
	Routing domain.Routing
	// Objects keeps first frames and serves the links to them and to the
	// videos; nil refuses image_to_video and shows no video links.
	Objects  objectstore.Store
	Frames   Frames
	Rewriter Rewriter
	Now      func() time.Time
	// Seed draws the seed of a request without one (default: random in
	// [0, 2147483647]).
	Seed func() int
	Log  *slog.Logger
}

// App is the video API's use cases.
type App struct{ cfg Config }

// New returns the use cases.
func New(cfg Config) *App {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Seed == nil {
		cfg.Seed = func() int { return rand.IntN(domain.MaxSeed + 1) }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &App{cfg: cfg}
}

// ErrNoObjectStore: image_to_video needs somewhere to keep the first frame.
var ErrNoObjectStore = errors.New("video: no object store is configured for first frames")

// ErrNoTenant: an admin credential acts for every tenant, so a generation
// it submitted would belong to none.
var ErrNoTenant = errors.New("an admin credential cannot submit generations; use a tenant's API key")

// actor records the video API's own changes in the task's history.
const actor = "video-api"

// Create validates and normalises r, checks and stores its first frame,
// rewrites its prompt and queues the generation on the route of c's tier.
// Nothing is stored when r is refused.
func (a *App) Create(ctx context.Context, c sched.Caller, r domain.Request) (task.Task, error) {
	if c.Tenant == "*" || c.Tenant == "" {
		return task.Task{}, ErrNoTenant
	}
	plan, err := a.cfg.Catalog.Normalize(r, a.cfg.Seed)
	if err != nil {
		return task.Task{}, err
	}
	v := &task.Video{Model: plan.Model.ID, Type: plan.Type, Prompt: plan.Prompt, NegativePrompt: plan.NegativePrompt,
		PromptExtend: plan.PromptExtend, Resolution: plan.Resolution, Duration: plan.Duration, FrameNum: plan.Frames(),
		Seed: plan.Seed, Watermark: plan.Watermark}
	var frame []byte
	var info domain.ImageInfo
	if plan.Image != "" {
		if plan.Type == domain.ImageToVideo && a.cfg.Objects == nil {
			return task.Task{}, ErrNoObjectStore
		}
		if frame, info, err = a.cfg.Frames.Load(ctx, plan.Image); err != nil {
			return task.Task{}, err
		}
		if plan.Type == domain.TextToVideo {
			// Checked, not used: a text_to_video has no first frame.
			frame, info = nil, domain.ImageInfo{}
		}
	}
	v.Width, v.Height = domain.OutputSize(plan.Resolution, plan.Type, info.Width, info.Height)
	if plan.PromptExtend {
		rewritten, err := a.cfg.Rewriter.Rewrite(ctx, plan.Prompt)
		if err != nil {
			return task.Task{}, fmt.Errorf("video: rewriting the prompt: %w", err)
		}
		// The model takes no longer prompt than a client may send.
		v.ActualPrompt = domain.Truncate(rewritten, domain.MaxPromptChars)
	}
	if frame != nil {
		v.ImageObjectKey = fmt.Sprintf("video-inputs/%s/%s.%s", c.Tenant, uuid.NewString(), info.Format)
		if _, err := a.cfg.Objects.Put(ctx, v.ImageObjectKey, bytes.NewReader(frame), int64(len(frame)), info.ContentType()); err != nil {
			return task.Task{}, fmt.Errorf("video: storing the first frame: %w", err)
		}
		// The runner reads the frame through this link for as long as the
		// task id is valid.
		if v.ImageURL, err = a.cfg.Objects.PresignGet(ctx, v.ImageObjectKey, domain.Retention); err != nil {
			a.removeObjects(ctx, v.ImageObjectKey)
			return task.Task{}, fmt.Errorf("video: signing the first frame's link: %w", err)
		}
	}
	route := a.cfg.Routing.For(c.Tier)
	// A failed generation is FAILED at once, as documented, not retried:
	// the same input would fail the same way, and the client polls for a
	// final status. An attempt lost with its agent fails it too; the client
	// submits again.
	priority, retries := route.Priority, 0
	tasks, err := a.cfg.Tasks.CreateTasks(ctx, c, task.SpecInput{
		Name: "video " + plan.Model.ID, Type: task.TypeVideo, Priority: &priority, MaxRetries: &retries, Queue: route.Queue,
		Resources: map[string]string{"nvidia.com/gpu": plan.Model.GPUs}, Video: v, Webhook: r.Webhook,
	}, "")
	if err != nil {
		a.removeObjects(ctx, v.ImageObjectKey)
		return task.Task{}, err
	}
	return tasks[0], nil
}

// View is a generation as GET shows it.
type View struct {
	ID     string
	Status string
	// Task is the scheduler task; zero when Status is UNKNOWN.
	Task task.Task
	// VideoURL links to the video of a SUCCEEDED generation.
	VideoURL string
	// FailCode and FailMessage say why a FAILED generation failed.
	FailCode, FailMessage string
}

// Get reports generation id. An unknown, removed or expired one, or a task
// that is not a video generation, is UNKNOWN; another tenant's is
// domain.ErrForbidden; an empty id is an *domain.InvalidError.
func (a *App) Get(ctx context.Context, c sched.Caller, id string) (View, error) {
	if err := domain.RequireTaskID(id); err != nil {
		return View{}, err
	}
	t, err := a.find(ctx, c, id)
	if errors.Is(err, task.ErrNotFound) {
		return View{ID: id, Status: domain.StatusUnknown}, nil
	}
	if err != nil {
		return View{}, err
	}
	v := View{ID: id, Status: domain.StatusOf(t, a.cfg.Now()), Task: t}
	switch v.Status {
	case domain.StatusUnknown:
		return View{ID: id, Status: domain.StatusUnknown}, nil
	case domain.StatusSucceeded:
		if t.Result != nil && t.Result.ObjectKey != "" && a.cfg.Objects != nil {
			// The link ends with the generation: the sweeper removes the
			// video then, so a link signed for longer would outlive it.
			if v.VideoURL, err = a.cfg.Objects.PresignGet(ctx, t.Result.ObjectKey, domain.Remaining(t, a.cfg.Now())); err != nil {
				return View{}, fmt.Errorf("video: signing the video's link: %w", err)
			}
		}
	case domain.StatusFailed:
		v.FailCode, v.FailMessage = failure(t.Error)
	}
	return v, nil
}

// codePrefix is a video API error code leading a runner's error text.
var codePrefix = regexp.MustCompile(`^([A-Z][A-Za-z]+(?:\.[A-Za-z]+)*): (.*)$`)

// failure splits a task's error into the documented code and message: a
// runner may lead its text with a code ("InvalidParameter: The size is not
// match"); anything else is an InternalError.
func failure(text string) (code, message string) {
	if m := codePrefix.FindStringSubmatch(text); m != nil {
		return m[1], m[2]
	}
	if text == "" {
		text = "the generation failed"
	}
	return "InternalError", text
}

// find reads a video task of any tenant and applies the tenant rule, so
// another tenant's task is refused (403) rather than hidden.
func (a *App) find(ctx context.Context, c sched.Caller, id string) (task.Task, error) {
	t, err := a.cfg.Tasks.GetTask(ctx, sched.Caller{Tenant: "*"}, id)
	if err != nil {
		return task.Task{}, err
	}
	if t.Spec.Type != task.TypeVideo {
		return task.Task{}, task.ErrNotFound
	}
	if c.Tenant != "*" && t.TenantID != c.Tenant {
		return task.Task{}, domain.ErrForbidden
	}
	return t, nil
}

// Delete applies the DELETE table to generation id and returns its status
// afterwards: CANCELED for a QUEUED one, UNKNOWN for a removed or unknown
// one; RUNNING and CANCELED ones are refused (domain.ErrTaskRunning,
// domain.ErrTaskCanceled). The decision is taken on the task as locked for
// the change, so it cannot race with an agent starting it.
func (a *App) Delete(ctx context.Context, c sched.Caller, id string) (string, error) {
	if err := domain.RequireTaskID(id); err != nil {
		return "", err
	}
	if _, err := a.find(ctx, c, id); errors.Is(err, task.ErrNotFound) {
		return domain.StatusUnknown, nil
	} else if err != nil {
		return "", err
	}
	var action domain.Deletion
	t, err := a.cfg.Tasks.ChangeTask(ctx, c, id, func(t task.Task, now time.Time) ([]task.Record, error) {
		var err error
		action, err = domain.DecideDelete(domain.StatusOf(t, now))
		switch {
		case err != nil:
			return nil, err
		case action == domain.DeleteCancel:
			return t.Cancel(now, c.Subject, "canceled through the video API")
		case action == domain.DeleteRemove:
			return t.Delete(now, c.Subject)
		}
		return nil, nil
	})
	switch {
	case errors.Is(err, task.ErrNotFound):
		return domain.StatusUnknown, nil
	case err != nil:
		return "", err
	case action == domain.DeleteCancel:
		return domain.StatusCanceled, nil
	case action == domain.DeleteRemove:
		a.removeObjects(ctx, objectKeys(t)...)
	}
	return domain.StatusUnknown, nil
}

// objectKeys lists what a video task keeps in the object store.
func objectKeys(t task.Task) []string {
	var keys []string
	if t.Spec.Video != nil && t.Spec.Video.ImageObjectKey != "" {
		keys = append(keys, t.Spec.Video.ImageObjectKey)
	}
	if t.Result != nil && t.Result.ObjectKey != "" {
		keys = append(keys, t.Result.ObjectKey)
	}
	return keys
}

// removeObjects deletes objects of a removed task. A failure is logged, not
// returned: the task is gone either way and its links expire on their own.
func (a *App) removeObjects(ctx context.Context, keys ...string) {
	for _, k := range keys {
		if k == "" || a.cfg.Objects == nil {
			continue
		}
		if err := a.cfg.Objects.Delete(ctx, k); err != nil {
			a.cfg.Log.Warn("removing a video object failed", "key", k, "err", err)
		}
	}
}

// DisplayID is the numeric id answers show next to the task id (the
// document's data.id), derived from the task id.
func DisplayID(id string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32() & 0x7fffffff
}
