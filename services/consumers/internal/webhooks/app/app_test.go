package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

type harness struct {
	store  *store
	clock  *clocktest.Fixed
	sender *sender
	app    *app.App
	stop   func()
}

func newHarness(t *testing.T, backoff domain.Backoff, reply func(string) app.SendResult) *harness {
	t.Helper()
	h := &harness{store: newStore(), clock: clocktest.NewFixed(t0), sender: &sender{reply: reply}}
	h.app = app.New(app.Config{Endpoints: h.store, Deliveries: deliveries{h.store}, Schedule: h.store, Sender: h.sender,
		Backoff: backoff, PerTenant: 2, Concurrency: 10, Poll: 2 * time.Millisecond, Now: h.clock.Now,
		Rand: func() float64 { return 0.5 }, Keys: rand.Reader})
	return h
}

func (h *harness) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.app.RunDispatcher(ctx) }()
	var once sync.Once
	h.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(h.stop)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func delivery(id, tenant, url string) domain.Delivery {
	return domain.Delivery{ID: id, TenantID: tenant, TaskID: "task-" + id, Status: domain.StatusCompleted, URL: url,
		Body: domain.Body("task-"+id, domain.StatusCompleted)}
}

func ok200(string) app.SendResult { return app.SendResult{HTTPStatus: 200} }

func TestDeliversSignedWithTheTenantsKey(t *testing.T) {
	h := newHarness(t, domain.DefaultBackoff, ok200)
	_, secret, err := h.app.SetEndpoint(context.Background(), app.Caller{Tenant: "acme"}, "https://default.example.com/hook")
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("set endpoint = %q, %v", secret, err)
	}
	key, _ := domain.ParseSecret(secret)
	h.store.add(delivery("msg_1", "acme", ""), t0, time.Hour)                          // the default endpoint
	h.store.add(delivery("msg_2", "acme", "https://own.example.com/x"), t0, time.Hour) // the task's own
	h.run(t)
	eventually(t, "both delivered", func() bool {
		return h.store.view("msg_1").State == domain.StateDelivered && h.store.view("msg_2").State == domain.StateDelivered
	})
	if h.sender.count("https://default.example.com/hook") != 1 || h.sender.count("https://own.example.com/x") != 1 {
		t.Fatalf("sent = %+v", h.sender.sent)
	}
	for _, s := range h.sender.sent {
		id := s.headers["webhook-id"]
		if s.headers["webhook-timestamp"] != "1795341600" || s.headers["webhook-signature"] != domain.Sign(key, id, t0.Unix(), []byte(s.body)) ||
			s.body != `{"task_id":"task-`+id+`","status":"completed"}` {
			t.Errorf("sent %+v", s)
		}
	}
}

func TestFailuresRetryWithGrowingDelaysThenDie(t *testing.T) {
	b := domain.Backoff{Base: time.Second, Max: time.Minute, MaxAge: 30 * time.Second}
	h := newHarness(t, b, func(string) app.SendResult { return app.SendResult{HTTPStatus: 500, Body: "oops"} })
	h.store.add(delivery("msg_1", "acme", "https://down.example.com/"), t0, b.MaxAge)
	h.run(t)
	for n := 1; ; n++ {
		eventually(t, "an attempt", func() bool { return len(h.store.attemptsOf("msg_1")) == n })
		v := h.store.view("msg_1")
		if v.State == domain.StateDead {
			break
		}
		h.clock.Set(v.NextAttemptAt)
	}
	as := h.store.attemptsOf("msg_1")
	// Attempts at 0, 1, 3, 7, 15 s (waits 1, 2, 4, 8); the next wait (16 s)
	// would end past the 30 s deadline.
	var waits []time.Duration
	for i := 1; i < len(as); i++ {
		waits = append(waits, as[i].At.Sub(as[i-1].At))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	if len(waits) != len(want) {
		t.Fatalf("waits = %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Errorf("wait %d = %s, want %s", i+1, waits[i], want[i])
		}
	}
	v := h.store.view("msg_1")
	if as[0].HTTPStatus != 500 || as[0].ResponseBody != "oops" || !strings.Contains(v.LastError, "retries exhausted") {
		t.Errorf("last attempt %+v, view %+v", as[len(as)-1], v)
	}
}

func TestRefusedAddressAndNoEndpointDieAtOnce(t *testing.T) {
	h := newHarness(t, domain.DefaultBackoff, func(string) app.SendResult {
		return app.SendResult{Err: errors.New("dial: the address is not public"), Refused: true}
	})
	h.store.add(delivery("msg_1", "acme", "http://10.0.0.8/hook"), t0, time.Hour)
	h.store.add(delivery("msg_2", "globex", ""), t0, time.Hour) // globex has no endpoint
	h.run(t)
	eventually(t, "both dead", func() bool {
		return h.store.view("msg_1").State == domain.StateDead && h.store.view("msg_2").State == domain.StateDead
	})
	if n := len(h.store.attemptsOf("msg_1")); n != 1 || !strings.Contains(h.store.view("msg_1").LastError, "not public") {
		t.Errorf("refused: %d attempts, %+v", n, h.store.view("msg_1"))
	}
	if v := h.store.view("msg_2"); !strings.Contains(v.LastError, "no endpoint") || h.sender.count("") != 0 {
		t.Errorf("no endpoint: %+v", v)
	}
}

// A receiver that hangs holds only its own tenant's slots: the other
// tenant's deliveries go through, and the slow tenant gets no more than
// its share claimed.
func TestSlowReceiverDelaysOnlyItsTenant(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, domain.DefaultBackoff, func(url string) app.SendResult {
		if strings.Contains(url, "slow") {
			<-release
		}
		return app.SendResult{HTTPStatus: 204}
	})
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
		h.store.add(delivery("msg_"+id, "slowco", "https://slow.example.com/"), t0, time.Hour)
	}
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
		h.store.add(delivery("msg_"+id, "fastco", "https://fast.example.com/"), t0, time.Hour)
	}
	h.run(t)
	eventually(t, "every fast delivery", func() bool {
		for _, id := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
			if h.store.view("msg_"+id).State != domain.StateDelivered {
				return false
			}
		}
		return true
	})
	if n := h.sender.count("https://slow.example.com/"); n != 2 {
		t.Errorf("%d slow deliveries in flight, want its 2 slots", n)
	}
	close(release)
	eventually(t, "the slow ones", func() bool { return h.sender.count("https://slow.example.com/") == 5 })
}

func TestEndpointSecretShownOnceAndRotated(t *testing.T) {
	h := newHarness(t, domain.DefaultBackoff, ok200)
	ctx := context.Background()
	acme := app.Caller{Tenant: "acme"}
	e, first, err := h.app.SetEndpoint(ctx, acme, " https://a.example.com/h ")
	if err != nil || first == "" || e.URL != "https://a.example.com/h" || !e.HasSecret {
		t.Fatalf("first set = %+v %q %v", e, first, err)
	}
	if _, again, err := h.app.SetEndpoint(ctx, acme, "https://b.example.com/h"); err != nil || again != "" {
		t.Errorf("second set showed a secret: %q %v", again, err)
	}
	_, rotated, err := h.app.RotateSecret(ctx, acme)
	if err != nil || rotated == "" || rotated == first {
		t.Errorf("rotate = %q, %v", rotated, err)
	}
	k, _ := domain.ParseSecret(rotated)
	if !bytes.Equal(h.store.endpoints["acme"].key, k) {
		t.Error("the rotated key is not the stored one")
	}
	var ie *domain.InvalidError
	if _, _, err := h.app.SetEndpoint(ctx, acme, "ftp://x/"); !errors.As(err, &ie) {
		t.Errorf("bad url: %v", err)
	}
	if _, _, err := h.app.SetEndpoint(ctx, app.Caller{Operator: true}, "https://x/"); !errors.Is(err, app.ErrForbidden) {
		t.Errorf("operator: %v", err)
	}
}

func TestListAndRedeliver(t *testing.T) {
	h := newHarness(t, domain.DefaultBackoff, ok200)
	ctx := context.Background()
	for _, id := range []string{"msg_1", "msg_2", "msg_3"} {
		h.store.add(delivery(id, "acme", "https://x.example.com/"), t0, time.Hour)
	}
	h.store.add(delivery("msg_9", "globex", "https://x.example.com/"), t0, time.Hour)
	page, next, err := h.app.ListDeliveries(ctx, app.Caller{Tenant: "acme"}, "", "", "", 2, "")
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("page = %v %q %v", page, next, err)
	}
	if _, _, err := h.app.ListDeliveries(ctx, app.Caller{Tenant: "acme"}, "", "", "globex", 0, ""); !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("another tenant's list: %v", err)
	}
	if _, _, err := h.app.GetDelivery(ctx, app.Caller{Tenant: "acme"}, "msg_9"); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("another tenant's delivery: %v", err)
	}
	h.run(t)
	eventually(t, "delivered", func() bool { return h.store.view("msg_1").State == domain.StateDelivered })
	h.clock.Set(t0.Add(time.Hour))
	v, err := h.app.Redeliver(ctx, app.Caller{Operator: true}, "msg_1")
	if err != nil || v.State != domain.StatePending {
		t.Fatalf("redeliver = %+v, %v", v, err)
	}
	eventually(t, "delivered again", func() bool { return len(h.store.attemptsOf("msg_1")) == 2 })
}

// A tenant whose stored key cannot be read (sealed under another service
// key) has its deliveries retried; other tenants' go out.
func TestUnreadableKeyHoldsUpOnlyItsTenant(t *testing.T) {
	h := newHarness(t, domain.Backoff{Base: time.Minute, Max: time.Hour, MaxAge: time.Hour}, ok200)
	h.store.add(delivery("msg_1", "broken", "https://b.example.com/"), t0, time.Hour)
	h.store.add(delivery("msg_2", "fine", "https://f.example.com/"), t0, time.Hour)
	broken := &brokenKeys{store: h.store}
	h.app = app.New(app.Config{Endpoints: h.store, Deliveries: deliveries{h.store}, Schedule: broken, Sender: h.sender,
		Backoff: domain.Backoff{Base: time.Minute, Max: time.Hour, MaxAge: time.Hour}, Poll: 2 * time.Millisecond, Now: h.clock.Now,
		Rand: func() float64 { return 0.5 }, Keys: rand.Reader})
	h.run(t)
	eventually(t, "both tried", func() bool { return len(h.store.attemptsOf("msg_1")) == 1 && len(h.store.attemptsOf("msg_2")) == 1 })
	if v := h.store.view("msg_2"); v.State != domain.StateDelivered {
		t.Errorf("the other tenant's delivery = %+v", v)
	}
	if v := h.store.view("msg_1"); v.State != domain.StatePending || !strings.Contains(v.LastError, "cannot sign") ||
		!v.NextAttemptAt.Equal(t0.Add(time.Minute)) || h.sender.count("https://b.example.com/") != 0 {
		t.Errorf("the broken tenant's delivery = %+v", v)
	}
}

// brokenKeys claims as store does, but tenant "broken"'s key is unreadable.
type brokenKeys struct{ *store }

func (b *brokenKeys) Claim(ctx context.Context, now time.Time, n, perTenant int, skip []string, leaseUntil time.Time) ([]app.Due, error) {
	due, err := b.store.Claim(ctx, now, n, perTenant, skip, leaseUntil)
	for i := range due {
		if due[i].Delivery.TenantID == "broken" {
			due[i].KeyErr = errors.New("webhook key: cannot open the sealed key")
		}
	}
	return due, err
}
