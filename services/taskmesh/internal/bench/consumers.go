package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// ConsumersOptions configures the event consumers benchmark.
type ConsumersOptions struct {
	Common
	// ReplayTasks is the replay corpus: tasks of five events each.
	ReplayTasks int
	// Deliveries is how many notifications the throughput run sends.
	Deliveries int
	// WebhookRate is the notifications/s of the latency run; LagRate the
	// task events/s of the usage lag run; both run For.
	WebhookRate, LagRate int
	For                  time.Duration
}

func (o *ConsumersOptions) defaults() {
	o.Common.defaults()
	if o.ReplayTasks <= 0 {
		o.ReplayTasks = 10_000
	}
	if o.Deliveries <= 0 {
		o.Deliveries = 5000
	}
	if o.WebhookRate <= 0 {
		o.WebhookRate = 500
	}
	if o.LagRate <= 0 {
		o.LagRate = 2000
	}
	if o.For <= 0 {
		o.For = 10 * time.Second
	}
}

// ConsumersResult holds the medians of the runs.
type ConsumersResult struct {
	Replay                   map[string]float64 // events/s per projection
	Deliveries               float64            // notifications/s to a local receiver
	DeliveryP50, DeliveryP99 time.Duration      // event → delivery at WebhookRate
	UsageLagP50, UsageLagP99 time.Duration      // event → metered at LagRate
}

// replayed are the projections whose replay rate is measured, in order.
var replayed = []string{"task_read_models", admission.Workloads, consumers.AuditTasks, consumers.Usage, consumers.Webhooks}

type consumersRun struct {
	replay         map[string]float64
	deliveries     float64
	delP50, delP99 time.Duration
	lagP50, lagP99 time.Duration
}

// Consumers measures the event consumers on a durable Postgres and the
// embedded broker, each run on a fresh database and fresh topics:
//
//   - replay: a corpus of task events (submitted, leased, started,
//     progressed, succeeded) is projected live, then `taskmesh replay`'s
//     rebuild of every projection is timed (events/s);
//   - webhooks: the consumers service (audit, usage and webhooks consuming
//     the same topic, as deployed) notifies a local receiver of each
//     task's end — first a burst (deliveries/s), then a paced run (the
//     time from the task's final event to its delivery);
//   - usage: task lifecycles at LagRate events/s, the time from each event
//     to its commit by the usage consumer.
func Consumers(ctx context.Context, o ConsumersOptions) (*ConsumersResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "consumers", nil)
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "event consumers: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	var runs []consumersRun
	for i := range o.Runs {
		r, err := consumersOnce(ctx, env, o, i)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return reportConsumers(o, runs), nil
}

func consumersOnce(ctx context.Context, env *env, o ConsumersOptions, run int) (consumersRun, error) {
	db := fmt.Sprintf("consumers_%d", run)
	if err := env.createDatabase(ctx, db); err != nil {
		return consumersRun{}, err
	}
	pools, err := migrateSchemas(ctx, env.server.URL(db))
	if err != nil {
		return consumersRun{}, err
	}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	k := env.broker.Config()
	var r consumersRun
	if r.replay, err = replayRates(ctx, pools, k, fmt.Sprintf("bench.replay.%d", run), o.ReplayTasks); err != nil {
		return r, err
	}
	hooks := &receiver{}
	srv := httptest.NewServer(hooks)
	defer srv.Close()
	if r.deliveries, err = deliveryBurst(ctx, pools[consumers.Schema], k, srv.URL, hooks, fmt.Sprintf("bench.hooks.%d", run), o.Deliveries); err != nil {
		return r, err
	}
	lat, err := deliveryLatency(ctx, pools[consumers.Schema], k, srv.URL, hooks, fmt.Sprintf("bench.hooklat.%d", run), o)
	if err != nil {
		return r, err
	}
	r.delP50, r.delP99 = percentile(lat, 50), percentile(lat, 99)
	lag, err := usageLag(ctx, pools[consumers.Schema], k, fmt.Sprintf("bench.usage.%d", run), o)
	if err != nil {
		return r, err
	}
	r.lagP50, r.lagP99 = percentile(lag, 50), percentile(lag, 99)
	return r, nil
}

// migrateSchemas opens and migrates the schemas whose projections are
// measured.
func migrateSchemas(ctx context.Context, url string) (map[string]*pgxpool.Pool, error) {
	sets := map[string][]pg.MigrationSet{scheduler.Schema: scheduler.Migrations(), admission.Schema: admission.Migrations(),
		consumers.Schema: consumers.Migrations()}
	pools := map[string]*pgxpool.Pool{}
	for schema, ms := range sets {
		pool, err := pg.Open(ctx, pg.Config{URL: url, Schema: schema, MaxConns: 48})
		if err != nil {
			return pools, err
		}
		pools[schema] = pool
		if err := pg.Migrate(ctx, pool, schema, ms...); err != nil {
			return pools, err
		}
	}
	return pools, nil
}

// taskEvent is one event of task n at version v.
func taskEvent(topic, tenant, task string, v int64, ev *taskv1.TaskEvent) *kgo.Record {
	ev.EventId, ev.AggregateId, ev.Version, ev.TenantId, ev.Actor = uuid.NewString(), task, v, tenant, "bench"
	ev.OccurredAt = timestamppb.Now()
	b, _ := proto.Marshal(ev) // a message of set fields always marshals
	return &kgo.Record{Topic: topic, Key: []byte(task), Value: b, Headers: []kgo.RecordHeader{
		{Key: projection.EventIDHeader, Value: []byte(ev.EventId)}}}
}

// lifecycle is a task's five events: every fourth asks for a GPU in a
// ClusterQueue (admission follows it), every tenth notifies url.
func lifecycle(topic string, n int, url string) []*kgo.Record {
	task, tenant := fmt.Sprintf("task-%07d", n), fmt.Sprintf("tenant-%02d", n%16)
	spec := &taskv1.TaskSpec{Name: task, Type: "shell", Command: "true"}
	submitted := &taskv1.TaskSubmitted{Spec: spec}
	if n%4 == 0 {
		spec.Resources, submitted.ClusterQueue = map[string]string{"nvidia.com/gpu": "1"}, "cq-bench"
	}
	if url != "" && n%10 == 0 {
		spec.Webhook = &taskv1.Webhook{Url: url}
	}
	return []*kgo.Record{
		taskEvent(topic, tenant, task, 1, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: submitted}}),
		taskEvent(topic, tenant, task, 2, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: "a", AgentId: "ag", MachineId: "m"}}}),
		taskEvent(topic, tenant, task, 3, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: "a"}}}),
		taskEvent(topic, tenant, task, 4, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{AttemptId: "a", Progress: 50}}}),
		taskEvent(topic, tenant, task, 5, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: "a", EndedAt: timestamppb.Now()}}}),
	}
}

func producer(k kafka.Config) (*kgo.Client, error) {
	opts, err := k.Opts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Millisecond))...)
}

func produceAll(ctx context.Context, k kafka.Config, recs []*kgo.Record) error {
	cl, err := producer(k)
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// replayRates projects a corpus live with every measured projection, then
// times each one's replay.
func replayRates(ctx context.Context, pools map[string]*pgxpool.Pool, k kafka.Config, topic string, tasks int) (map[string]float64, error) {
	var recs []*kgo.Record
	for n := range tasks {
		recs = append(recs, lifecycle(topic, n, "http://127.0.0.1:9/unused")...)
	}
	if err := produceAll(ctx, k, recs); err != nil {
		return nil, err
	}
	specs := map[string]struct {
		spec projection.ReplaySpec
		pool *pgxpool.Pool
	}{}
	for schema, list := range map[string][]projection.ReplaySpec{scheduler.Schema: scheduler.ReplaySpecs(k),
		admission.Schema: admission.ReplaySpecs(k), consumers.Schema: consumers.ReplaySpecs(k)} {
		for _, s := range list {
			s.Topic = topic
			specs[s.Name] = struct {
				spec projection.ReplaySpec
				pool *pgxpool.Pool
			}{s, pools[schema]}
		}
	}
	rates := map[string]float64{}
	for _, name := range replayed {
		x := specs[name]
		if err := projectLive(ctx, x.pool, k, x.spec, int64(len(recs))); err != nil {
			return nil, fmt.Errorf("%s live: %w", name, err)
		}
		rep, err := projection.Replay(ctx, x.pool, x.spec)
		if err != nil {
			return nil, fmt.Errorf("%s replay: %w", name, err)
		}
		if !rep.Equal() {
			return nil, fmt.Errorf("%s: the replay differs from the live tables", name)
		}
		rates[name] = float64(rep.Records) / rep.Duration.Seconds()
	}
	return rates, nil
}

// projectLive builds a projection's live tables from its topic with a
// runner under the projection's name (its replay compares with them).
func projectLive(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, spec projection.ReplaySpec, want int64) error {
	identity := map[string]string{}
	for _, t := range append(append([]string(nil), spec.Tables...), spec.Scratch...) {
		identity[t] = t
	}
	runner := projection.NewRunner(pool, projection.Config{Name: spec.Name, Topic: spec.Topic, Partitions: 16, Kafka: k},
		spec.NewHandler(identity))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(rctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Minute)
	for runner.Applied() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("applied %d of %d records", runner.Applied(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// receiver is the local webhook receiver: it times each delivery against
// when its task's final event was produced.
type receiver struct {
	sent     sync.Map // task id → time its final event was produced
	mu       sync.Mutex
	lats     []time.Duration
	received atomic.Int64
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	var body struct {
		TaskID string `json:"task_id"`
	}
	b, _ := io.ReadAll(req.Body)
	_ = json.Unmarshal(b, &body)
	if at, ok := r.sent.Load(body.TaskID); ok {
		r.mu.Lock()
		r.lats = append(r.lats, now.Sub(at.(time.Time)))
		r.mu.Unlock()
	}
	r.received.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) reset() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lats
	r.lats = nil
	r.received.Store(0)
	return out
}

// serviceKey seals the benchmark tenants' webhook secrets: one for the
// whole process, as the services started on one database must share it.
var serviceKey = func() []byte {
	k := make([]byte, consumers.WebhookKeySize)
	rand.Read(k)
	return k
}()

// startService runs the consumers service on topic until the returned stop.
func startService(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, topic string,
	after func(string, []*kgo.Record)) (stop func(), err error) {
	key := serviceKey
	svc, err := consumers.New(consumers.Config{DB: pool, Kafka: k, TaskTopic: topic, QuotaTopic: topic + ".quota", Partitions: 16,
		AfterCommit: after, Webhooks: consumers.WebhookConfig{Key: key, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(rctx) }()
	return func() { cancel(); <-done }, nil
}

// deliveryBurst sends n notifications' events at once and times them to
// the last delivery.
func deliveryBurst(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, url string, r *receiver, topic string, n int) (float64, error) {
	stop, err := startService(ctx, pool, k, topic, nil)
	if err != nil {
		return 0, err
	}
	defer stop()
	r.reset()
	var recs []*kgo.Record
	for i := range n {
		task, tenant := fmt.Sprintf("hook-%07d", i), fmt.Sprintf("tenant-%02d", i%32)
		recs = append(recs,
			taskEvent(topic, tenant, task, 1, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
				Spec: &taskv1.TaskSpec{Name: task, Webhook: &taskv1.Webhook{Url: url + "/burst"}}}}}),
			taskEvent(topic, tenant, task, 2, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{}}}))
	}
	start := time.Now()
	if err := produceAll(ctx, k, recs); err != nil {
		return 0, err
	}
	if err := waitReceived(r, int64(n), 10*time.Minute); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func waitReceived(r *receiver, n int64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for r.received.Load() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d notifications received", r.received.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// paced produces build(i) for i = 0, 1, … at rate per second for d, in
// ticks of 10 ms; it returns how many it produced.
func paced(ctx context.Context, k kafka.Config, rate int, d time.Duration, build func(i int) []*kgo.Record) (int, error) {
	cl, err := producer(k)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start, n := time.Now(), 0
	var failed atomic.Value
	for time.Since(start) < d {
		<-tick.C
		due := int(float64(rate) * time.Since(start).Seconds())
		for ; n < due; n++ {
			for _, rec := range build(n) {
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Store(err)
					}
				})
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return n, err
	}
	if err, _ := failed.Load().(error); err != nil {
		return n, err
	}
	return n, nil
}

// deliveryLatency notifies at o.WebhookRate for o.For and returns each
// delivery's time from its task's final event.
func deliveryLatency(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, url string, r *receiver, topic string, o ConsumersOptions) ([]time.Duration, error) {
	stop, err := startService(ctx, pool, k, topic, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	r.reset()
	n, err := paced(ctx, k, o.WebhookRate, o.For, func(i int) []*kgo.Record {
		task, tenant := fmt.Sprintf("lat-%07d", i), fmt.Sprintf("tenant-%02d", i%32)
		r.sent.Store(task, time.Now())
		return []*kgo.Record{
			taskEvent(topic, tenant, task, 1, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
				Spec: &taskv1.TaskSpec{Name: task, Webhook: &taskv1.Webhook{Url: url + "/paced"}}}}}),
			taskEvent(topic, tenant, task, 2, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{}}}),
		}
	})
	if err != nil {
		return nil, err
	}
	if err := waitReceived(r, int64(n), 5*time.Minute); err != nil {
		return nil, err
	}
	return r.reset(), nil
}

// usageLag produces task lifecycles at o.LagRate events/s for o.For and
// returns each event's time to its commit by the usage consumer.
func usageLag(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, topic string, o ConsumersOptions) ([]time.Duration, error) {
	var mu sync.Mutex
	var lags []time.Duration
	var metered atomic.Int64
	stop, err := startService(ctx, pool, k, topic, func(consumer string, recs []*kgo.Record) {
		if consumer != consumers.Usage {
			return
		}
		now := time.Now()
		mu.Lock()
		for _, rec := range recs {
			lags = append(lags, now.Sub(rec.Timestamp))
		}
		mu.Unlock()
		metered.Add(int64(len(recs)))
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	n, err := paced(ctx, k, o.LagRate/5, o.For, func(i int) []*kgo.Record { return lifecycle(topic, i, "") })
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for metered.Load() < int64(5*n) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("usage metered %d of %d events", metered.Load(), 5*n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return lags, nil
}

// reportConsumers prints every run and the medians, and returns the medians.
func reportConsumers(o ConsumersOptions, runs []consumersRun) *ConsumersResult {
	rates := map[string]sample{}
	var del, d50, d99, l50, l99 sample
	var rows [][]string
	for i, r := range runs {
		row := []string{fmt.Sprint(i + 1)}
		for _, name := range replayed {
			rates[name] = append(rates[name], r.replay[name])
			row = append(row, perSecond(r.replay[name]))
		}
		del, d50, d99 = append(del, r.deliveries), append(d50, float64(r.delP50)), append(d99, float64(r.delP99))
		l50, l99 = append(l50, float64(r.lagP50)), append(l99, float64(r.lagP99))
		rows = append(rows, append(row, perSecond(r.deliveries), ms(r.delP50), ms(r.delP99), ms(r.lagP50), ms(r.lagP99)))
	}
	fmt.Fprintf(o.Out, "\nreplay: %d tasks × 5 events into fresh tables; webhooks: a burst of %d deliveries, then %d/s for %s;\n",
		o.ReplayTasks, o.Deliveries, o.WebhookRate, o.For)
	fmt.Fprintf(o.Out, "usage: task events at %d/s for %s, event → committed by the usage consumer (audit and webhooks consume too)\n",
		o.LagRate, o.For)
	header := []string{"run"}
	for _, name := range replayed {
		header = append(header, "replay "+name+" ev/s")
	}
	table(o.Out, append(header, "deliveries/s", "delivery p50", "delivery p99", "usage lag p50", "usage lag p99"), rows)
	res := &ConsumersResult{Replay: map[string]float64{}, Deliveries: del.median(), DeliveryP50: time.Duration(d50.median()),
		DeliveryP99: time.Duration(d99.median()), UsageLagP50: time.Duration(l50.median()), UsageLagP99: time.Duration(l99.median())}
	var summaryRows [][]string
	names := append([]string(nil), replayed...)
	sort.Strings(names)
	for _, name := range names {
		res.Replay[name] = rates[name].median()
		summaryRows = append(summaryRows, []string{"replay " + name + " events/s", rates[name].format(perSecond), "", ""})
	}
	summary(o.Out, len(runs), append(summaryRows,
		[]string{"webhook deliveries/s to a local receiver", del.format(perSecond), ">= 1000", verdict(res.Deliveries >= 1000)},
		[]string{"webhook event → delivery p50", d50.format(millis), "", ""},
		[]string{"webhook event → delivery p99", d99.format(millis), "< 500 ms", verdict(res.DeliveryP99 < 500*time.Millisecond)},
		[]string{fmt.Sprintf("usage lag p50 at %d events/s", o.LagRate), l50.format(millis), "", ""},
		[]string{fmt.Sprintf("usage lag p99 at %d events/s", o.LagRate), l99.format(millis), "< 250 ms", verdict(res.UsageLagP99 < 250*time.Millisecond)},
	))
	return res
}
