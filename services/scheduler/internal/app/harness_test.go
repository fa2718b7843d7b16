package app_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The use cases run here on the in-memory fake of their stores
// (apptest.Store, held to the same contract as the Postgres store), a
// clock the tests move, a real filesystem object store and a recording
// quota service.

// resolveCall is one question to the quota service.
type resolveCall struct {
	Caller       app.Caller
	Queue, Quota string
	Resources    map[string]string
}

// admission is a recording app.Admission: it answers ClusterQueue, or err.
// Queued stays are admitted at once when Admit is set, refused with
// QueueErr when that is.
type admission struct {
	mu           sync.Mutex
	calls        []resolveCall
	queued       []domain.Task
	finished     []domain.Task
	ClusterQueue string
	Err          error
	Admit        bool
	QueueErr     error
	// FinishAdmits answers every FinishWorkload.
	FinishAdmits []app.AdmissionDecision
}

func (a *admission) QueueWorkload(_ context.Context, t domain.Task) (app.AdmissionDecision, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queued = append(a.queued, t)
	if a.QueueErr != nil || !a.Admit {
		return app.AdmissionDecision{}, false, a.QueueErr
	}
	return app.AdmissionDecision{TaskID: t.ID, Epoch: t.AdmissionEpoch, ClusterQueue: t.ClusterQueue, Flavors: map[string]string{"nvidia.com/gpu": "a100"}}, true, nil
}

func (a *admission) FinishWorkload(_ context.Context, t domain.Task) ([]app.AdmissionDecision, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finished = append(a.finished, t)
	return a.FinishAdmits, a.QueueErr
}

// Finished returns the ends handed to the admission loop directly.
func (a *admission) Finished() []domain.Task {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]domain.Task(nil), a.finished...)
}

// Queued returns the stays handed to the admission loop directly.
func (a *admission) Queued() []domain.Task {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]domain.Task(nil), a.queued...)
}

func (a *admission) ResolveQueue(_ context.Context, c app.Caller, queue, quota string, resources map[string]string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, resolveCall{Caller: c, Queue: queue, Quota: quota, Resources: resources})
	return a.ClusterQueue, a.Err
}

func (a *admission) Calls() []resolveCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]resolveCall(nil), a.calls...)
}

type harness struct {
	t         *testing.T
	ctx       context.Context
	store     *apptest.Store
	clock     *clocktest.Fixed
	hub       *app.Hub
	objects   objectstore.Store
	admission *admission
	app       *app.App
}

// newHarness builds the use cases; cfg may be adjusted by the options.
func newHarness(t *testing.T, opts ...func(*app.Config)) *harness {
	t.Helper()
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects",
		Secret: []byte(strings.Repeat("s", objectstore.MinSecretLen))})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: context.Background(), store: apptest.NewStore(), clock: clocktest.NewFixed(apptest.T0),
		hub: app.NewHub(), objects: objects, admission: &admission{}}
	cfg := app.Config{}
	for _, o := range opts {
		o(&cfg)
	}
	h.app = app.New(h.store.Stores(), objects, h.clock.Now, h.hub, cfg, nil)
	return h
}

// withAdmission wires the recording quota service.
func (h *harness) withAdmission() *harness {
	h.app.SetAdmission(h.admission)
	return h
}

func user(tenant string) app.Caller {
	return app.Caller{Tenant: tenant, Subject: "key-" + tenant, IP: "10.0.0.1", Tier: "standard"}
}

func agent(id string) app.Caller {
	return app.Caller{Tenant: "*", Subject: "agent:" + id, AgentID: id, IP: "10.0.1.1"}
}

var admin = app.Caller{Tenant: "*", Subject: "admin"}

// spec is a shell task named name.
func spec(name string, o ...func(*domain.SpecInput)) domain.SpecInput {
	in := domain.SpecInput{Name: name, Command: "true"}
	for _, f := range o {
		f(&in)
	}
	return in
}

func intp(v int) *int { return &v }

func (h *harness) create(c app.Caller, in domain.SpecInput) domain.Task {
	h.t.Helper()
	ts, err := h.app.CreateTasks(h.ctx, c, in, "")
	if err != nil {
		h.t.Fatalf("create %s: %v", in.Name, err)
	}
	if len(ts) != 1 {
		h.t.Fatalf("create %s made %d tasks", in.Name, len(ts))
	}
	return ts[0]
}

// claim claims up to limit tasks as agentID on machine.
func (h *harness) claim(agentID, machine string, limit int, labels ...string) []domain.Task {
	h.t.Helper()
	ts, _, err := h.app.ClaimTasks(h.ctx, agent(agentID), app.ClaimRequest{AgentID: agentID, MachineID: machine, Labels: labels, Limit: limit})
	if err != nil {
		h.t.Fatalf("claim: %v", err)
	}
	return ts
}

// claimOne claims exactly the task id (fails the test otherwise).
func (h *harness) claimOne(agentID, machine, id string, labels ...string) domain.Task {
	h.t.Helper()
	ts := h.claim(agentID, machine, 1, labels...)
	if len(ts) != 1 || ts[0].ID != id {
		h.t.Fatalf("claim by %s = %v, want %s", agentID, taskIDs(ts), id)
	}
	return ts[0]
}

// running creates a task and has agentID start it.
func (h *harness) running(agentID, machine string, in domain.SpecInput) domain.Task {
	h.t.Helper()
	t := h.create(user("t1"), in)
	t = h.claimOne(agentID, machine, t.ID)
	t, err := h.app.StartTask(h.ctx, agent(agentID), t.ID, agentID, t.AttemptID)
	if err != nil {
		h.t.Fatalf("start: %v", err)
	}
	return t
}

func (h *harness) get(id string) domain.Task {
	h.t.Helper()
	t, ok := h.store.Task(id)
	if !ok {
		h.t.Fatalf("no task %s", id)
	}
	return t
}

// lastEvent is the event last stored for task id.
func (h *harness) lastEvent(id string) domain.Event {
	h.t.Helper()
	evs := h.store.Events(id)
	if len(evs) == 0 {
		h.t.Fatalf("no events of %s", id)
	}
	return evs[len(evs)-1].Event
}

func (h *harness) wantStatus(id string, want domain.Status) {
	h.t.Helper()
	if got := h.get(id).Status; got != want {
		h.t.Errorf("task %s is %s, want %s", id, got, want)
	}
}

func taskIDs(ts []domain.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// wantInvalid checks err is a domain.InvalidError about field.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	var inv *domain.InvalidError
	if !errors.As(err, &inv) || inv.Field != field {
		t.Errorf("%s: err = %v, want an invalid %s", what, err, field)
	}
}

// eventNames lists the names of task id's events.
func (h *harness) eventNames(id string) string {
	var names []string
	for _, e := range h.store.Events(id) {
		names = append(names, e.Event.EventName())
	}
	return fmt.Sprint(names)
}

// second is a call's error, for wantErr with a call that also answers a
// value.
func second[T any](_ T, err error) error { return err }
