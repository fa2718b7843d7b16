package scheduler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/views"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// HistorySpec describes generated task history: what a deployment holds
// after weeks of work, for measuring what that history costs
// (docs/operations.md, "Measuring at scale"). Every task's lifecycle is
// decided by the domain's own commands (submit, lease, start, progress,
// complete, cancel; failures with their retries), so its events, its
// tasks row and its task_views row are exactly what the scheduler and the
// projection would have written.
type HistorySpec struct {
	// Finished tasks, created evenly over Span before Now: mostly
	// completed, some failed after their retries, some cancelled.
	Finished int
	// Pending tasks, created over the last day before Now, that need
	// labels no agent of the measurement has (BacklogLabels): the backlog
	// of a GPU pool whose machines are busy or gone.
	Pending int
	// Tenants the tasks belong to, by a Zipf-like share: the first
	// (HistoryTenant(0)) has the most.
	Tenants int           // default 40
	Span    time.Duration // default 30 days
	Now     time.Time     // default time.Now()
	Seed    uint64
	// BatchSize is tasks per transaction (default 2000); Workers how many
	// transactions run at once (default 2).
	BatchSize, Workers int
	// Progress, if set, is called after each batch with the tasks stored
	// so far.
	Progress func(stored int)
}

// BacklogLabels are the labels every generated pending task needs.
var BacklogLabels = []string{"gpu:h100", "pool:reserved"}

// HistoryTenant is the id of the i-th generated tenant (0 has the most
// tasks).
func HistoryTenant(i int) string { return fmt.Sprintf("tenant-%02d", i) }

// HistoryReport says what LoadHistory stored.
type HistoryReport struct {
	Tasks, Events int
	// PerTenant counts the tasks of each tenant.
	PerTenant map[string]int
}

func (s *HistorySpec) defaults() {
	if s.Tenants <= 0 {
		s.Tenants = 40
	}
	if s.Span <= 0 {
		s.Span = 30 * 24 * time.Hour
	}
	if s.Now.IsZero() {
		s.Now = time.Now()
	}
	if s.BatchSize <= 0 {
		s.BatchSize = 2000
	}
	if s.Workers <= 0 {
		s.Workers = 2
	}
}

// LoadHistory writes the tasks spec describes into the scheduler schema
// on pool's search_path: their events in the event store, their tasks
// rows, and their task_views rows as the projection folds them. Batches
// commit in creation order per worker; each is one transaction, as a
// batch of commands would be. It does not publish the events: run
// PublishHistory once it returns.
func LoadHistory(ctx context.Context, pool *pgxpool.Pool, spec HistorySpec) (HistoryReport, error) {
	spec.defaults()
	total := spec.Finished + spec.Pending
	batches := (total + spec.BatchSize - 1) / spec.BatchSize
	weights := tenantWeights(spec.Tenants)
	var (
		next   atomic.Int64
		stored atomic.Int64
		mu     sync.Mutex
		rep    = HistoryReport{PerTenant: map[string]int{}}
		wg     sync.WaitGroup
		errs   = make(chan error, spec.Workers)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range spec.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := int(next.Add(1)) - 1; b < batches && ctx.Err() == nil; b = int(next.Add(1)) - 1 {
				from, to := b*spec.BatchSize, min(total, (b+1)*spec.BatchSize)
				n, perTenant, err := loadBatch(ctx, pool, spec, weights, b, from, to)
				if err != nil {
					errs <- fmt.Errorf("history batch %d: %w", b, err)
					cancel()
					return
				}
				mu.Lock()
				rep.Tasks += to - from
				rep.Events += n
				for t, c := range perTenant {
					rep.PerTenant[t] += c
				}
				mu.Unlock()
				if s := stored.Add(int64(to - from)); spec.Progress != nil {
					spec.Progress(int(s))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return rep, err
	}
	return rep, ctx.Err()
}

// loadBatch generates tasks [from, to) and stores them in one transaction.
func loadBatch(ctx context.Context, pool *pgxpool.Pool, spec HistorySpec, weights []float64, batch, from, to int) (int, map[string]int, error) {
	// One generator per batch: the history is the same whatever the
	// number of workers.
	r := rand.New(rand.NewPCG(spec.Seed, uint64(batch)))
	lifecycles := make([][]domain.Record, 0, to-from)
	perTenant := map[string]int{}
	for i := from; i < to; i++ {
		tenant := HistoryTenant(pick(r, weights))
		perTenant[tenant]++
		var (
			recs []domain.Record
			err  error
		)
		if i < spec.Finished {
			// Evenly over the span, oldest first, ending an hour before now.
			created := spec.Now.Add(-spec.Span).Add(time.Duration(float64(spec.Span-time.Hour) * float64(i) / float64(max(1, spec.Finished))))
			recs, err = finishedLifecycle(r, tenant, created)
		} else {
			k := i - spec.Finished
			created := spec.Now.Add(-24 * time.Hour).Add(time.Duration(float64(24*time.Hour-time.Minute) * float64(k) / float64(max(1, spec.Pending))))
			recs, err = pendingLifecycle(r, tenant, created)
		}
		if err != nil {
			return 0, nil, err
		}
		lifecycles = append(lifecycles, recs)
	}
	events := 0
	changes := make([]views.TaskChange, len(lifecycles))
	for i, recs := range lifecycles {
		sub := recs[0].Event.(domain.Submitted)
		c := views.TaskChange{TaskID: sub.ID, Events: make([]views.VersionedRecord, len(recs))}
		for v, rec := range recs {
			c.Events[v] = views.VersionedRecord{Version: int64(v + 1), TenantID: sub.TenantID, Record: rec}
		}
		changes[i] = c
		events += len(recs)
	}
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := postgres.SaveNew(ctx, tx, lifecycles); err != nil {
			return err
		}
		// The projection's own store folds the same records into the rows
		// ListTasks reads.
		return views.TaskViewStore{Table: "task_views"}.Store(ctx, tx, changes)
	})
	return events, perTenant, err
}

// tenantWeights are cumulative Zipf-like shares: tenant k has 1/(k+1).
func tenantWeights(n int) []float64 {
	cum := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / float64(k+1)
		cum[k] = sum
	}
	for k := range cum {
		cum[k] /= sum
	}
	return cum
}

func pick(r *rand.Rand, cum []float64) int {
	x := r.Float64()
	for k, c := range cum {
		if x < c {
			return k
		}
	}
	return len(cum) - 1
}

// newTaskID is a UUIDv7 for a task created at t, as the scheduler makes
// them at submission (time-ordered ids).
func newTaskID(r *rand.Rand, t time.Time) string {
	var u uuid.UUID
	binary.BigEndian.PutUint64(u[8:], r.Uint64())
	binary.BigEndian.PutUint64(u[0:], r.Uint64())
	ms := uint64(t.UnixMilli())
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | (u[6] & 0x0f) // version 7
	u[8] = 0x80 | (u[8] & 0x3f) // RFC 4122 variant
	return u.String()
}

func randomID(r *rand.Rand) string {
	var u uuid.UUID
	binary.BigEndian.PutUint64(u[0:], r.Uint64())
	binary.BigEndian.PutUint64(u[8:], r.Uint64())
	u[6] = 0x40 | (u[6] & 0x0f)
	u[8] = 0x80 | (u[8] & 0x3f)
	return u.String()
}

// The work the history is made of: names, commands and how often each
// comes up.
var historyWork = []struct {
	name, typ, command string
	args               []string
	labels             []string
}{
	{"train-resnet50", domain.TypePython, "python", []string{"train.py", "--epochs", "3"}, []string{"gpu:a100"}},
	{"finetune-llama-7b", domain.TypePython, "python", []string{"finetune.py", "--lora"}, []string{"gpu:a100"}},
	{"eval-checkpoint", domain.TypePython, "python", []string{"eval.py"}, nil},
	{"convert-onnx", domain.TypeShell, "trtexec", []string{"--onnx=model.onnx"}, []string{"gpu:t4"}},
	{"etl-nightly", domain.TypeShell, "sh", []string{"-c", "etl.sh"}, nil},
	{"render-frames", domain.TypeShell, "blender", []string{"-b", "scene.blend", "-a"}, []string{"gpu:t4"}},
	{"embed-corpus", domain.TypePython, "python", []string{"embed.py", "--shard", "7"}, nil},
	{"healthcheck", domain.TypeShell, "nvidia-smi", nil, nil},
}

// specFor draws a task spec as users submit them: mostly default
// priority, a few urgent or background ones.
func specFor(r *rand.Rand, labels []string) (domain.Spec, error) {
	w := historyWork[r.IntN(len(historyWork))]
	prio := 5
	switch x := r.IntN(100); {
	case x < 5:
		prio = 1 + r.IntN(3)
	case x < 15:
		prio = 7 + r.IntN(4)
	}
	if labels == nil {
		labels = w.labels
	}
	return domain.NormalizeSpec(domain.SpecInput{Name: fmt.Sprintf("%s-%d", w.name, r.IntN(10000)), Type: w.typ,
		Command: w.command, Args: w.args, Labels: labels, Priority: &prio})
}

// historyAgents are the machines the history's attempts ran on.
const historyAgents = 64

// finishedLifecycle is one task from submission to its end, as the
// scheduler records it: about 90% complete (6% after a failed attempt),
// 7% fail every attempt, 3% are cancelled while they wait.
func finishedLifecycle(r *rand.Rand, tenant string, created time.Time) ([]domain.Record, error) {
	spec, err := specFor(r, nil)
	if err != nil {
		return nil, err
	}
	// A failing task fails fast; retries are quick so history stays
	// inside the span.
	spec.RetryDelay = 30
	id := newTaskID(r, created)
	user := "user:" + tenant
	recs := domain.Submit(created, id, tenant, user, "", "", spec, "")
	t := domain.Fold(recs)
	add := func(more []domain.Record) {
		for _, x := range more {
			t = domain.Apply(t, x)
		}
		recs = append(recs, more...)
	}
	now := created
	outcome := r.IntN(100)
	if outcome < 3 {
		c, err := t.Cancel(now.Add(time.Duration(1+r.IntN(600))*time.Second), user, "no longer needed")
		if err != nil {
			return nil, err
		}
		add(c)
		return recs, nil
	}
	failures := 0 // attempts that fail before the outcome
	switch {
	case outcome < 10:
		failures = spec.MaxRetries + 1
	case outcome < 16:
		failures = 1
	}
	for attempt := 0; !t.Status.Final(); attempt++ {
		more, end, err := historyAttempt(r, t, now, attempt < failures)
		if err != nil {
			return nil, err
		}
		add(more)
		now = end
	}
	return recs, nil
}

// historyAttempt is one attempt of t from now: waiting in the queue, a
// claim, a start, maybe progress, and its end (a failure when fail). It
// returns the records and when the attempt ended.
func historyAttempt(r *rand.Rand, t domain.Task, now time.Time, fail bool) ([]domain.Record, time.Time, error) {
	var recs []domain.Record
	add := func(more []domain.Record) {
		for _, x := range more {
			t = domain.Apply(t, x)
		}
		recs = append(recs, more...)
	}
	now = later(now, t.RetryAt).Add(time.Duration(50+r.IntN(3000)) * time.Millisecond)
	n := r.IntN(historyAgents)
	agent, machine, attemptID := fmt.Sprintf("agent-%02d", n), fmt.Sprintf("gpu-node-%02d", n), randomID(r)
	l, err := t.Lease(now, attemptID, agent, machine, randomID(r))
	if err != nil {
		return nil, now, err
	}
	add(l)
	now = now.Add(time.Duration(20+r.IntN(200)) * time.Millisecond)
	st, err := t.Start(now, agent, attemptID)
	if err != nil {
		return nil, now, err
	}
	add(st)
	// Runs from a second to four minutes: inside the lease, so no renewal
	// is needed.
	run := time.Duration(math.Min(240, math.Exp(r.Float64()*5.5))*1000) * time.Millisecond
	if r.IntN(3) == 0 {
		p, err := t.ReportProgress(now.Add(run/2), agent, attemptID, 50, "half way")
		if err != nil {
			return nil, now, err
		}
		add(p)
	}
	now = now.Add(run)
	o := domain.Outcome{EndedAt: now}
	if fail {
		o.ExitCode = 1
	}
	c, _, err := t.Complete(now, agent, attemptID, o)
	if err != nil {
		return nil, now, err
	}
	add(c)
	return recs, now, nil
}

// pendingLifecycle is a task submitted to a pool no agent of the
// measurement serves (BacklogLabels).
func pendingLifecycle(r *rand.Rand, tenant string, created time.Time) ([]domain.Record, error) {
	spec, err := specFor(r, BacklogLabels)
	if err != nil {
		return nil, err
	}
	return domain.Submit(created, newTaskID(r, created), tenant, "user:"+tenant, "", "", spec, ""), nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// PublishHistory publishes every event of the scheduler's event store
// that is not yet in Kafka with the service's own outbox relay (same
// name, topics and routes as Service.Run's), and then records the end of
// the task topic as the task_views projection's offsets: LoadHistory
// already wrote the rows the projection would have made of those
// records. Afterwards a scheduler started on pool continues from there,
// and `taskmesh replay` finds every event on the topic. The relay logs to
// log (nil: nowhere).
func PublishHistory(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, topic string, partitions int32, log *slog.Logger) error {
	if topic == "" {
		topic = Topic
	}
	if partitions <= 0 {
		partitions = 16
	}
	last, found, err := lastPosition(ctx, pool)
	if err != nil || !found {
		return err
	}
	relay := outbox.New(pool, outbox.Config{Name: "scheduler", Topic: topic, Partitions: partitions,
		Routes: map[string]string{postgres.GroupAggregateType: OrchestrationTopic, postgres.TemplateAggregateType: OrchestrationTopic,
			postgres.ManagedAggregateType: ManagedTopic}, Kafka: k, Logger: log})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	// Until the relay has published the last event and saved its
	// checkpoint there (an idle relay saves at once), so the next relay
	// starts without scanning the topic for what it finds published.
	// Positions, not event ids: batches committed side by side interleave
	// their ids, so the last position need not hold the highest id.
	caughtUp := func() bool {
		if relay.Stats().Cursor.Less(last) {
			return false
		}
		var saved outbox.Position
		var tx string
		err := pool.QueryRow(ctx, `SELECT tx_id::text, event_id FROM outbox_checkpoints WHERE relay = 'scheduler'`).Scan(&tx, &saved.EventID)
		if err != nil {
			return false
		}
		if _, err := fmt.Sscan(tx, &saved.TxID); err != nil {
			return false
		}
		return !saved.Less(last)
	}
	for !caughtUp() {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		case err := <-done:
			cancel()
			return fmt.Errorf("publish history: relay stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		return fmt.Errorf("publish history: %w", err)
	}
	return markProjected(ctx, pool, k, topic)
}

// lastPosition is the position of the last event in the event store
// (found is false for none).
func lastPosition(ctx context.Context, pool *pgxpool.Pool) (last outbox.Position, found bool, err error) {
	var txText string
	// Ordered by the qualified column: an unqualified tx_id would name the
	// output column, its text form, and "999" sorts after "1298".
	err = pool.QueryRow(ctx, `SELECT tx_id::text, id FROM events ORDER BY events.tx_id DESC, events.id DESC LIMIT 1`).Scan(&txText, &last.EventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return last, false, nil
	}
	if err != nil {
		return last, false, fmt.Errorf("publish history: %w", err)
	}
	if _, err := fmt.Sscan(txText, &last.TxID); err != nil {
		return last, false, fmt.Errorf("publish history: tx_id %q: %w", txText, err)
	}
	return last, true, nil
}

// markProjected stores, as the task_views projection's offsets, the
// offset after the last record of each partition of topic: what the
// projection would have stored after applying every record. That is not
// the partition's end, which counts the relay's transaction markers too.
func markProjected(ctx context.Context, pool *pgxpool.Pool, k kafka.Config, topic string) error {
	opts, err := k.Opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return fmt.Errorf("publish history: end offsets: %w", err)
	}
	next, err := lastRecords(ctx, opts, topic, listed)
	if err != nil {
		return err
	}
	var parts []int32
	var offs []int64
	for p, o := range next {
		parts, offs = append(parts, p), append(offs, o)
	}
	_, err = pool.Exec(ctx, `INSERT INTO projection_offsets (projection, topic, partition, next_offset)
		SELECT $1, $2, p, o FROM unnest($3::int[], $4::bigint[]) AS x(p, o)
		ON CONFLICT (projection, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()`,
		readModels, topic, parts, offs)
	if err != nil {
		return fmt.Errorf("publish history: projection offsets: %w", err)
	}
	return nil
}

// lastRecords returns, per partition of topic, the offset after its last
// record, given the partitions' ends. A committed transaction ends with
// its marker, right after its last record in that partition, so the last
// record is at end − 2: each partition is read until it shows up (or,
// should the last transaction have been aborted, until a deadline, taking
// the last record seen).
func lastRecords(ctx context.Context, opts []kgo.Opt, topic string, listed kadm.ListedOffsets) (map[int32]int64, error) {
	const tail = 16
	next := map[int32]int64{}
	ends := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	listed.Each(func(o kadm.ListedOffset) {
		next[o.Partition] = 0
		if o.Offset > 0 {
			ends[o.Partition] = o.Offset
			from[o.Partition] = kgo.NewOffset().At(max(0, o.Offset-tail))
		}
	})
	if len(from) == 0 {
		return next, nil
	}
	reader, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer reader.Close()
	done := func() bool {
		for p, end := range ends {
			if next[p] < end-1 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !done() && time.Now().Before(deadline); {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := reader.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) { next[r.Partition] = max(next[r.Partition], r.Offset+1) })
	}
	for p := range ends {
		if next[p] == 0 {
			return nil, fmt.Errorf("publish history: no record found at the end of partition %d of %s", p, topic)
		}
	}
	return next, nil
}
