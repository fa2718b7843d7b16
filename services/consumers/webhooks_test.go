package consumers_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
)

// verify checks a request the way a receiver following the Standard
// Webhooks specification does, written from the specification's text and
// not from the signer: the signed content is "<webhook-id>.<webhook-
// timestamp>.<body>"; the key is the base64 part of the whsec_ secret; a
// signature is "v1," and the base64 HMAC-SHA256 of the content; the header
// may list several, separated by spaces, and one match suffices; the
// timestamp must be within five minutes of now.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("bad timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp outside the tolerance")
	}
	if !strings.HasPrefix(secret, "whsec_") {
		return errors.New("not a whsec_ secret")
	}
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte("."))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, s := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(s, ",")
		if ok && version == "v1" && subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1 {
			return nil
		}
	}
	return errors.New("no signature matches")
}

// receiver is a local HTTP server that records what it receives; paths
// under /fail answer 500.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
}

type received struct {
	path   string
	at     time.Time
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{path: req.URL.Path, at: time.Now(), header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		if strings.HasPrefix(req.URL.Path, "/fail") {
			http.Error(w, strings.Repeat("x", 5000), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) at(path string) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, x := range r.got {
		if x.path == path {
			out = append(out, x)
		}
	}
	return out
}

// Notifications reach a local receiver (allow-listed) signed the Standard
// Webhooks way with the tenant's secret, with the documented body exactly;
// a receiver answering 500 gets retries with growing delays, then the
// delivery is dead; it can be redelivered; redelivered records notify
// nothing twice.
func TestWebhooksDeliverRetryAndDie(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t)
	var applied atomic.Int64 // task-topic records the webhook consumer committed
	s := e.start(consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		// MaxAge leaves room for several pauses on a loaded machine: the
		// deadline runs from the event, so a late consumer and slow attempts
		// eat into it, and the test needs at least four attempts.
		Backoff: consumers.Backoff{Base: 100 * time.Millisecond, Max: time.Second, MaxAge: 5 * time.Second}},
		AfterCommit: func(name string, recs []*kgo.Record) {
			if name == consumers.Webhooks {
				applied.Add(int64(len(recs)))
			}
		}})

	set, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: rcv.URL + "/default"})
	if err != nil || !hasPrefix(set.GetSecret(), "whsec_") || set.GetEndpoint().GetUrl() != rcv.URL+"/default" {
		t.Fatalf("set endpoint = %v, %v", set, err)
	}
	secret := set.GetSecret()
	if again, _ := s.hooks().GetWebhookEndpoint(tenantKey("acme"), &webhookv1.GetWebhookEndpointRequest{}); !again.GetEndpoint().GetHasSecret() {
		t.Errorf("endpoint = %v", again)
	}

	now := time.Now().UTC()
	sc := newScript(t)
	own := &taskv1.TaskSpec{Name: "own", Webhook: &taskv1.Webhook{Url: rcv.URL + "/own"}}
	sc.add("acme", "task-own", now, submitted(own))
	sc.add("acme", "task-own", now, started("a"))
	sc.add("acme", "task-own", now, succeeded("a"))
	sc.add("acme", "task-default", now, submitted(&taskv1.TaskSpec{Name: "default"}))
	sc.add("acme", "task-default", now, failed("a", true)) // a retry follows: not the end
	sc.add("acme", "task-default", now, retried())
	sc.add("acme", "task-default", now, failed("b", false))
	sc.add("acme", "task-cancel", now, submitted(&taskv1.TaskSpec{Name: "c"}))
	sc.add("acme", "task-cancel", now, cancelled())
	sc.add("globex", "task-quiet", now, submitted(&taskv1.TaskSpec{Name: "no endpoint anywhere"}))
	sc.add("globex", "task-quiet", now, succeeded(""))
	sc.add("acme", "task-fail", now, submitted(&taskv1.TaskSpec{Name: "f", Webhook: &taskv1.Webhook{Url: rcv.URL + "/fail"}}))
	sc.add("acme", "task-fail", now, succeeded(""))
	e.produce(sc.records)

	eventually(t, "three notifications", func() bool { return len(rcv.at("/own")) == 1 && len(rcv.at("/default")) == 2 })
	bodies := map[string]bool{}
	for _, r := range append(rcv.at("/own"), rcv.at("/default")...) {
		if err := verify(secret, r.header, r.body, time.Now()); err != nil {
			t.Errorf("%s: %v", r.path, err)
		}
		if r.header.Get("Content-Type") != "application/json" || !hasPrefix(r.header.Get("webhook-id"), "msg_") {
			t.Errorf("headers %v", r.header)
		}
		bodies[string(r.body)] = true
	}
	for _, want := range []string{`{"task_id":"task-own","status":"completed"}`, `{"task_id":"task-default","status":"failed"}`,
		`{"task_id":"task-cancel","status":"cancelled"}`} {
		if !bodies[want] {
			t.Errorf("no body %s among %v", want, bodies)
		}
	}
	forged := rcv.at("/own")[0]
	if verify("whsec_"+base64.StdEncoding.EncodeToString([]byte("another key")), forged.header, forged.body, time.Now()) == nil {
		t.Error("the verifier accepts another key: it checks nothing")
	}

	// The failing receiver: growing pauses, then dead.
	eventually(t, "the failing delivery to die", func() bool {
		l, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{State: "dead"})
		return err == nil && len(l.GetDeliveries()) == 1
	})
	tries := rcv.at("/fail")
	if len(tries) < 4 {
		t.Fatalf("%d attempts at the failing receiver", len(tries))
	}
	// Each pause is at least its backoff (100 ms doubling, capped at 1 s,
	// no jitter here). A loaded machine only makes pauses longer, so the
	// lower bound is what can be checked: growing wall-clock gaps are not
	// (a late first retry makes the next gap look shorter).
	for i := 1; i < len(tries); i++ {
		want := min(100*time.Millisecond<<(i-1), time.Second)
		// Receiver timestamps are taken after the request arrives, so the
		// gap may be short of the backoff by the delivery's own latency.
		if gap := tries[i].at.Sub(tries[i-1].at); gap < want-25*time.Millisecond {
			t.Errorf("pause %d (%s) shorter than its backoff (%s)", i, gap, want)
		}
	}
	l, _ := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{State: "dead"})
	dead := l.GetDeliveries()[0]
	got, err := s.hooks().GetWebhookDelivery(tenantKey("acme"), &webhookv1.GetWebhookDeliveryRequest{DeliveryId: dead.GetId()})
	if err != nil || int(got.GetDelivery().GetAttempts()) != len(tries) || len(got.GetDelivery().GetAttemptLog()) != len(tries) ||
		got.GetDelivery().GetAttemptLog()[0].GetHttpStatus() != 500 || len(got.GetDelivery().GetAttemptLog()[0].GetResponseBody()) != 1024 ||
		!strings.Contains(got.GetDelivery().GetLastError(), "retries exhausted") {
		t.Errorf("dead delivery = %v, %v", got, err)
	}

	// Nothing for globex (no endpoint): its delivery is skipped, not listed.
	if l, _ := s.hooks().ListWebhookDeliveries(tenantKey("globex"), &webhookv1.ListWebhookDeliveriesRequest{}); len(l.GetDeliveries()) != 0 {
		t.Errorf("globex deliveries = %v", l)
	}
	// Another tenant's delivery does not exist for globex.
	if _, err := s.hooks().GetWebhookDelivery(tenantKey("globex"), &webhookv1.GetWebhookDeliveryRequest{DeliveryId: dead.GetId()}); status.Code(err) != codes.NotFound ||
		grpcserver.Code(err) != 32004 {
		t.Errorf("globex reading acme's delivery: %v", err)
	}

	// Redeliver the dead one (it fails again, once more at least).
	before := len(rcv.at("/fail"))
	if _, err := s.hooks().RedeliverWebhook(operator, &webhookv1.RedeliverWebhookRequest{DeliveryId: dead.GetId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the redelivery", func() bool { return len(rcv.at("/fail")) > before })

	// Every record again (new offsets, the same events): once the consumer
	// has applied them, still no new notification.
	e.produce(sc.records)
	eventually(t, "the records applied twice", func() bool { return applied.Load() >= int64(2*len(sc.records)) })
	all, err := s.hooks().ListWebhookDeliveries(operator, &webhookv1.ListWebhookDeliveriesRequest{})
	if err != nil || len(all.GetDeliveries()) != 4 {
		t.Fatalf("deliveries after a redelivery of the records = %v, %v", all, err)
	}
	rot, err := s.hooks().RotateWebhookSecret(tenantKey("acme"), &webhookv1.RotateWebhookSecretRequest{})
	if err != nil || rot.GetSecret() == secret || !hasPrefix(rot.GetSecret(), "whsec_") {
		t.Errorf("rotate = %v, %v", rot, err)
	}
	if _, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: "gopher://x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad endpoint: %v", err)
	}
}

// Without an allow-list, targets on loopback (by address or by a name that
// resolves there) and private networks are refused: the delivery is dead
// at once and nothing reaches the receiver.
func TestWebhooksRefusePrivateTargets(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t)
	s := e.start(consumers.Config{})
	_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())
	now := time.Now().UTC()
	sc := newScript(t)
	targets := map[string]string{"task-loop": rcv.URL + "/x", "task-name": "http://localhost:" + port + "/x",
		"task-ten": "http://10.1.2.3/x", "task-meta": "http://169.254.169.254/latest"}
	for task, url := range targets {
		sc.add("acme", task, now, submitted(&taskv1.TaskSpec{Name: task, Webhook: &taskv1.Webhook{Url: url}}))
		sc.add("acme", task, now, succeeded(""))
	}
	e.produce(sc.records)
	eventually(t, "four dead deliveries", func() bool {
		l, err := s.hooks().ListWebhookDeliveries(operator, &webhookv1.ListWebhookDeliveriesRequest{State: "dead"})
		return err == nil && len(l.GetDeliveries()) == 4
	})
	l, _ := s.hooks().ListWebhookDeliveries(operator, &webhookv1.ListWebhookDeliveriesRequest{State: "dead"})
	for _, d := range l.GetDeliveries() {
		if d.GetAttempts() != 1 || !strings.Contains(d.GetLastError(), "not public") {
			t.Errorf("%s: %d attempts, %q", d.GetTaskId(), d.GetAttempts(), d.GetLastError())
		}
	}
	if n := len(rcv.at("/x")); n != 0 {
		t.Errorf("the receiver got %d requests", n)
	}
}

// A repeat's circuit-breaker alert goes through the same path as task
// notifications: to the tenant's default endpoint, signed, once per event
// however often the record is read, and listed with the deliveries; a
// tenant without an endpoint gets nothing; the replay equals the live rows.
func TestCircuitBreakerAlert(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t)
	var alerts atomic.Int64
	s := e.start(consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		AfterCommit: func(name string, recs []*kgo.Record) {
			if name == consumers.WebhookAlerts {
				alerts.Add(int64(len(recs)))
			}
		}})
	set, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: rcv.URL + "/alerts"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	opened := func(tenant, group, id string) *kgo.Record {
		return orchestrationRecord(t, group, tenant, id, now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCircuitOpened{
			TaskGroupCircuitOpened: &taskv1.TaskGroupCircuitOpened{ConsecutiveFailures: 3, Failures: 3}}})
	}
	recs := []*kgo.Record{
		orchestrationRecord(t, "group-1", "acme", "ev-created", now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCreated{
			TaskGroupCreated: &taskv1.TaskGroupCreated{Name: "nightly", Mode: "repeat"}}}),
		opened("acme", "group-1", "ev-open"),
		opened("globex", "group-2", "ev-open-globex"),
	}
	e.produce(recs)
	eventually(t, "the alert", func() bool { return len(rcv.at("/alerts")) == 1 })
	got := rcv.at("/alerts")[0]
	if string(got.body) != `{"task_group_id":"group-1","status":"circuit_open"}` || got.header.Get("webhook-id") != "msg_ev-open" {
		t.Errorf("alert %s %v", got.body, got.header)
	}
	if err := verify(set.GetSecret(), got.header, got.body, time.Now()); err != nil {
		t.Errorf("alert signature: %v", err)
	}
	e.produce(recs) // read again: no second alert
	eventually(t, "the records applied twice", func() bool { return alerts.Load() >= int64(2*len(recs)) })
	// globex has no endpoint: its alert is skipped, not listed.
	l, err := s.hooks().ListWebhookDeliveries(operator, &webhookv1.ListWebhookDeliveriesRequest{})
	if err != nil || len(l.GetDeliveries()) != 1 {
		t.Fatalf("deliveries = %v, %v", l, err)
	}
	mine, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{})
	if err != nil || len(mine.GetDeliveries()) != 1 || mine.GetDeliveries()[0].GetStatus() != "circuit_open" ||
		mine.GetDeliveries()[0].GetTaskId() != "group-1" {
		t.Errorf("acme's deliveries = %v, %v", mine, err)
	}
	if n := len(rcv.at("/alerts")); n != 1 {
		t.Errorf("%d alerts", n)
	}
	for _, spec := range consumers.ReplaySpecs(e.broker.Config()) {
		if spec.Name != consumers.WebhookAlerts {
			continue
		}
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil || !rep.Equal() {
			t.Errorf("replay of %s = %+v, %v", spec.Name, rep, err)
		}
	}
}

// A task group's end is one notification, through the same signed,
// retried, recorded path: to the group's own endpoint when it was created
// with one, else to the tenant's default; once per event however often
// the record is read; a deleted group is forgotten; the replay equals the
// live rows.
func TestGroupEndNotification(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t)
	var applied atomic.Int64
	s := e.start(consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		AfterCommit: func(name string, recs []*kgo.Record) {
			if name == consumers.WebhookAlerts {
				applied.Add(int64(len(recs)))
			}
		}})
	set, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: rcv.URL + "/default"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	created := func(group, id, url string) *kgo.Record {
		return orchestrationRecord(t, group, "acme", id, now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCreated{
			TaskGroupCreated: &taskv1.TaskGroupCreated{Name: group, Mode: "parallel", WebhookUrl: url}}})
	}
	ev := func(group, id string, x any) *kgo.Record {
		env := &taskv1.OrchestrationEvent{}
		switch x := x.(type) {
		case *taskv1.OrchestrationEvent_TaskGroupCompleted:
			env.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupFailed:
			env.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupCanceled:
			env.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupDeleted:
			env.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupStarted:
			env.Event = x
		}
		return orchestrationRecord(t, group, "acme", id, now, env)
	}
	recs := []*kgo.Record{
		created("grp-own", "ev-c1", rcv.URL+"/group"),
		created("grp-default", "ev-c2", ""),
		created("grp-cancel", "ev-c3", rcv.URL+"/group"),
		ev("grp-own", "ev-s1", &taskv1.OrchestrationEvent_TaskGroupStarted{TaskGroupStarted: &taskv1.TaskGroupStarted{}}),
		ev("grp-own", "ev-done", &taskv1.OrchestrationEvent_TaskGroupCompleted{TaskGroupCompleted: &taskv1.TaskGroupCompleted{}}),
		ev("grp-default", "ev-fail", &taskv1.OrchestrationEvent_TaskGroupFailed{TaskGroupFailed: &taskv1.TaskGroupFailed{Reason: "a member failed"}}),
		ev("grp-cancel", "ev-cancel", &taskv1.OrchestrationEvent_TaskGroupCanceled{TaskGroupCanceled: &taskv1.TaskGroupCanceled{Reason: "by user"}}),
		ev("grp-cancel", "ev-del", &taskv1.OrchestrationEvent_TaskGroupDeleted{TaskGroupDeleted: &taskv1.TaskGroupDeleted{}}),
	}
	e.produce(recs)
	eventually(t, "three group notifications", func() bool { return len(rcv.at("/group"))+len(rcv.at("/default")) == 3 })
	bodies := map[string]string{}
	for _, path := range []string{"/group", "/default"} {
		for _, got := range rcv.at(path) {
			bodies[got.header.Get("webhook-id")] = path + " " + string(got.body)
			if err := verify(set.GetSecret(), got.header, got.body, time.Now()); err != nil {
				t.Errorf("%s signature: %v", got.header.Get("webhook-id"), err)
			}
		}
	}
	want := map[string]string{
		"msg_ev-done":   `/group {"task_group_id":"grp-own","status":"completed"}`,
		"msg_ev-fail":   `/default {"task_group_id":"grp-default","status":"failed"}`,
		"msg_ev-cancel": `/group {"task_group_id":"grp-cancel","status":"cancelled"}`,
	}
	if !maps.Equal(bodies, want) {
		t.Errorf("notifications = %v, want %v", bodies, want)
	}
	e.produce(recs) // read again: no second notification
	eventually(t, "the records applied twice", func() bool { return applied.Load() >= int64(2*len(recs)) })
	if n := len(rcv.at("/group")) + len(rcv.at("/default")); n != 3 {
		t.Errorf("%d notifications after a second read", n)
	}
	l, err := s.hooks().ListWebhookDeliveries(tenantKey("acme"), &webhookv1.ListWebhookDeliveriesRequest{TaskId: "grp-own"})
	if err != nil || len(l.GetDeliveries()) != 1 || l.GetDeliveries()[0].GetStatus() != "completed" ||
		l.GetDeliveries()[0].GetState() != "delivered" {
		t.Errorf("grp-own's deliveries = %v, %v", l, err)
	}
	var remembered []string
	rows, err := e.pool.Query(context.Background(), `SELECT group_id FROM webhook_groups ORDER BY group_id`)
	if err == nil {
		remembered, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || !slices.Equal(remembered, []string{"grp-default", "grp-own"}) {
		t.Errorf("webhook_groups = %v, %v (the deleted group is forgotten)", remembered, err)
	}
	for _, spec := range consumers.ReplaySpecs(e.broker.Config()) {
		if spec.Name != consumers.WebhookAlerts && spec.Name != consumers.Webhooks {
			continue
		}
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil || !rep.Equal() {
			t.Errorf("replay of %s = %+v, %v", spec.Name, rep, err)
		}
	}
}
