package bench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// AdmissionOptions configures the admission benchmark.
type AdmissionOptions struct {
	Common
	Workloads int // pending workloads
	Queues    int // ClusterQueues, spread evenly over Cohorts
	Cohorts   int
	// GPUs is each queue's nominal quota; every workload asks for one.
	GPUs int
}

func (o *AdmissionOptions) defaults() {
	o.Common.defaults()
	if o.Workloads <= 0 {
		o.Workloads = 10_000
	}
	if o.Queues <= 0 {
		o.Queues = 50
	}
	if o.Cohorts <= 0 {
		o.Cohorts = 5
	}
	if o.GPUs <= 0 {
		o.GPUs = 20
	}
}

// AdmissionResult holds the medians of the runs.
type AdmissionResult struct {
	// Admissions committed per second from the first task end published
	// to the commit of the last admission.
	Decisions float64
	// From a task's end being published (TaskSucceeded produced) to the
	// commit of the next admission in its cohort: Kafka, the task
	// projection, the wait for the loop and the cycle's own work included.
	FreedP50 time.Duration
	FreedP99 time.Duration
	// From the commit recording WorkloadFinished to the commit of the next
	// WorkloadAdmitted in the cohort (0 when the same cycle did both).
	RecordedP99 time.Duration
}

// Admission measures the quota service's admission layer end to end: the
// workloads are TaskSubmitted events on the task topic (as the scheduler
// publishes them), every admission is read back from the quota topic (as
// the scheduler reads it) and answered at once with a TaskSucceeded, so
// capacity is freed steadily until every workload ran. Reported: admissions
// per second; the time from a task's end being published to the next
// admission in its cohort being committed; and from WorkloadFinished
// committed to that admission committed. Times of admissions are their
// transactions' commit timestamps (the server runs with
// track_commit_timestamp), not the events' occurred_at, which the loop
// takes when its cycle starts, before it has even read the end.
func Admission(ctx context.Context, o AdmissionOptions) (*AdmissionResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "admission", map[string]string{"track_commit_timestamp": "on"})
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "admission: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	var rates, p50s, p99s, rec99s sample
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		r, err := admissionRun(ctx, env, o, run)
		if err != nil {
			return nil, err
		}
		rates, p50s, p99s = append(rates, r.Decisions), append(p50s, float64(r.FreedP50)), append(p99s, float64(r.FreedP99))
		rec99s = append(rec99s, float64(r.RecordedP99))
		rows = append(rows, []string{fmt.Sprint(run), perSecond(r.Decisions), ms(r.FreedP50), ms(r.FreedP99), ms(r.RecordedP99)})
	}
	fmt.Fprintf(o.Out, "\n%d workloads (1 GPU each) over %d ClusterQueues of %d GPUs in %d cohorts; each admission answered by the task's end\n",
		o.Workloads, o.Queues, o.GPUs, o.Cohorts)
	table(o.Out, []string{"run", "admissions/s", "end published → admission committed p50", "p99", "finished → admitted committed p99"}, rows)
	res := &AdmissionResult{Decisions: rates.median(), FreedP50: time.Duration(p50s.median()), FreedP99: time.Duration(p99s.median()),
		RecordedP99: time.Duration(rec99s.median())}
	summary(o.Out, o.Runs, [][]string{
		{"admission decisions/s", rates.format(perSecond), ">= 5000", verdict(res.Decisions >= 5000)},
		// Finishing and the next admission are usually committed by one
		// cycle's transaction, so this is near zero by construction; the
		// rows below, from the task's end on the task topic, are judged.
		{"WorkloadFinished → next WorkloadAdmitted committed p99", rec99s.format(millis), "", ""},
		{"task end published → next admission committed p50", p50s.format(millis), "", ""},
		{"task end published → next admission committed p99", p99s.format(millis), "< 100 ms", verdict(res.FreedP99 < 100*time.Millisecond)},
	})
	return res, nil
}

// admissionRun runs the layer once on a fresh database and topics.
func admissionRun(ctx context.Context, env *env, o AdmissionOptions, run int) (*AdmissionResult, error) {
	db := fmt.Sprintf("admission%d", run)
	if err := env.createDatabase(ctx, db); err != nil {
		return nil, err
	}
	return admissionOn(ctx, env, o, db, "w")
}

// admissionOn runs the layer once on db's admission schema (migrated
// here if it is not yet) and topics named after db, with workloads whose
// task ids start with prefix; workloads recorded before (other prefixes)
// stay and are not counted.
func admissionOn(ctx context.Context, env *env, o AdmissionOptions, db, prefix string) (*AdmissionResult, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(db), Schema: admission.Schema, MaxConns: 16})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := pg.Migrate(ctx, pool, admission.Schema, admission.Migrations()...); err != nil {
		return nil, err
	}
	taskTopic, quotaTopic := "bench."+db+".admission.tasks", "bench."+db+".quota"
	svc, err := admission.New(admission.Config{DB: pool, Kafka: env.broker.Config(), Topic: quotaTopic, TaskTopic: taskTopic,
		NoDefaults: true, Logger: env.log.With("database", db)})
	if err != nil {
		return nil, err
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: benchToken})
	if err != nil {
		return nil, err
	}
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	go func() { defer wg.Done(); _ = svc.Run(runCtx) }()
	defer func() { cancel(); srv.Stop(); wg.Wait() }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	// Topology: cohorts c0…, queues q0… round-robin over them.
	op := authn.Outgoing(ctx, authn.Principal{Kind: authn.KindAdmin, Subject: "bench"}, benchToken)
	api := quotav1.NewAdmissionServiceClient(conn)
	cohortOf := make([]int, o.Queues)
	for c := range o.Cohorts {
		if _, err := api.PutCohort(op, &quotav1.PutCohortRequest{Name: fmt.Sprintf("c%d", c), Spec: &quotav1.CohortSpec{}}); err != nil {
			return nil, err
		}
	}
	for q := range o.Queues {
		cohortOf[q] = q % o.Cohorts
		spec := &quotav1.ClusterQueueSpec{Cohort: fmt.Sprintf("c%d", cohortOf[q]), ResourceGroups: []*quotav1.ResourceGroup{{
			CoveredResources: []string{"nvidia.com/gpu"}, Flavors: []*quotav1.FlavorQuotas{{Name: "default-flavor",
				Resources: []*quotav1.ResourceQuota{{Name: "nvidia.com/gpu", NominalQuota: fmt.Sprint(o.GPUs)}}}}}},
			Preemption: &quotav1.ClusterQueuePreemption{WithinClusterQueue: "LowerPriority", ReclaimWithinCohort: "Any", MinPriorityGap: 3}}
		if _, err := api.PutClusterQueue(op, &quotav1.PutClusterQueueRequest{Name: fmt.Sprintf("q%d", q), Spec: spec}); err != nil {
			return nil, err
		}
	}

	kopts, err := env.broker.Config().Opts()
	if err != nil {
		return nil, err
	}
	producer, err := kgo.NewClient(append(kopts, kgo.DefaultProduceTopic(taskTopic), kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	consumer, err := kgo.NewClient(append(kopts, kgo.ConsumeTopics(quotaTopic), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()

	// Every workload waits before capacity is freed: the queues fill up
	// with the first ones, the rest stay pending.
	deadline := time.Now().Add(5 * time.Minute)
	produceErr := make(chan error, 1)
	event := func(id string, version int64, ev *taskv1.TaskEvent) *kgo.Record {
		ev.EventId, ev.AggregateId, ev.Version, ev.OccurredAt, ev.TenantId = fmt.Sprintf("%s-%d", id, version), id, version, timestamppb.Now(), "bench"
		b, _ := proto.Marshal(ev)
		return &kgo.Record{Key: []byte(id), Value: b}
	}
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case produceErr <- err:
			default:
			}
		}
	}
	for i := range o.Workloads {
		id := fmt.Sprintf("%s%d", prefix, i)
		p := int32(1 + i%10)
		producer.Produce(ctx, event(id, 1, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
			ClusterQueue: fmt.Sprintf("q%d", i%o.Queues),
			Spec:         &taskv1.TaskSpec{Name: id, Priority: &p, Resources: map[string]string{"nvidia.com/gpu": "1"}}}}}), done)
	}
	if err := producer.Flush(ctx); err != nil {
		return nil, err
	}
	// Capacity is freed only once every workload is recorded as waiting.
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM workloads WHERE starts_with(task_id, $1)`, prefix).Scan(&n); err != nil {
			return nil, err
		}
		if n == o.Workloads {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("admission bench: only %d of %d workloads recorded", n, o.Workloads)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if o.PGStats {
		if err := pgstats.Reset(ctx, pool); err != nil {
			return nil, err
		}
	}
	// Answer each admission with the task's end, remembering when.
	ended := make(map[string]time.Time, o.Workloads)
	for len(ended) < o.Workloads {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("admission bench: only %d of %d workloads admitted", len(ended), o.Workloads)
		}
		select {
		case err := <-produceErr:
			return nil, err
		default:
		}
		fctx, cancelPoll := context.WithTimeout(ctx, time.Second)
		fs := consumer.PollFetches(fctx)
		cancelPoll()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			var env quotav1.QuotaEvent
			if proto.Unmarshal(r.Value, &env) != nil || env.GetWorkloadAdmitted() == nil {
				return
			}
			id := env.GetWorkloadAdmitted().GetTaskId()
			if _, seen := ended[id]; seen || !strings.HasPrefix(id, prefix) {
				return
			}
			ended[id] = time.Now()
			producer.Produce(ctx, event(id, 2, &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{}}}), done)
		})
	}
	if err := producer.Flush(ctx); err != nil {
		return nil, err
	}
	if o.PGStats {
		if err := pgstats.Print(ctx, pool, o.Out); err != nil {
			return nil, err
		}
	}
	return admissionStats(ctx, pool, ended, cohortOf, prefix)
}

// admissionStats reads the recorded events in commit order with their
// commit timestamps: the admission rate from the first end published to
// the commit of the last admission, and for each recorded end the delay
// from its TaskSucceeded being published (ended) to the commit of the
// first admission in its cohort committed after it. A negative delay is
// kept as it is: it would mean the measurement is wrong, not fast.
func admissionStats(ctx context.Context, pool *pgxpool.Pool, ended map[string]time.Time, cohortOf []int, prefix string) (*AdmissionResult, error) {
	recs, err := admissionRecords(ctx, pool, cohortOf, prefix)
	if err != nil {
		return nil, err
	}
	var firstEnd time.Time
	for _, at := range ended {
		if firstEnd.IsZero() || at.Before(firstEnd) {
			firstEnd = at
		}
	}
	type end struct {
		task      string
		committed time.Time
	}
	var lat, recorded []time.Duration
	var lastAdmit time.Time
	admitted := 0
	waiting := map[int][]end{} // cohort → ends not yet followed by an admission
	for _, r := range recs {
		if !r.admitted {
			waiting[r.cohort] = append(waiting[r.cohort], end{r.task, r.committed})
			continue
		}
		if r.committed.After(firstEnd) {
			admitted++
			lastAdmit = r.committed
		}
		for _, w := range waiting[r.cohort] {
			lat = append(lat, r.committed.Sub(ended[w.task]))
			recorded = append(recorded, r.committed.Sub(w.committed))
		}
		waiting[r.cohort] = waiting[r.cohort][:0]
	}
	if admitted == 0 || len(lat) == 0 {
		return nil, fmt.Errorf("admission bench: no admission after the first end (%d records)", len(recs))
	}
	return &AdmissionResult{Decisions: float64(admitted) / lastAdmit.Sub(firstEnd).Seconds(),
		FreedP50: percentile(lat, 50), FreedP99: percentile(lat, 99), RecordedP99: percentile(recorded, 99)}, nil
}

// admissionRecord is a WorkloadAdmitted or WorkloadFinished event.
type admissionRecord struct {
	admitted  bool
	task      string
	cohort    int
	committed time.Time // its transaction's commit timestamp
}

// admissionRecords reads every WorkloadAdmitted and WorkloadFinished in
// commit order. Events are only ever inserted, so a row's xmin is the
// transaction that recorded it.
func admissionRecords(ctx context.Context, pool *pgxpool.Pool, cohortOf []int, prefix string) ([]admissionRecord, error) {
	rows, err := pool.Query(ctx, `
		SELECT e.event_type, w.task_id, w.cluster_queue, pg_xact_commit_timestamp(e.xmin)
		FROM events e JOIN workloads w ON e.aggregate_id = 'workload/' || w.task_id
		WHERE e.event_type IN ('WorkloadAdmitted', 'WorkloadFinished') AND starts_with(w.task_id, $1)
		ORDER BY pg_xact_commit_timestamp(e.xmin), e.tx_id, e.id`, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []admissionRecord
	for rows.Next() {
		var typ, queue string
		var committed *time.Time
		var r admissionRecord
		if err := rows.Scan(&typ, &r.task, &queue, &committed); err != nil {
			return nil, err
		}
		if committed == nil {
			return nil, fmt.Errorf("admission bench: no commit timestamp (is track_commit_timestamp on?)")
		}
		var q int
		if _, err := fmt.Sscanf(queue, "q%d", &q); err != nil || q >= len(cohortOf) {
			return nil, fmt.Errorf("admission bench: unexpected queue %q", queue)
		}
		r.admitted, r.cohort, r.committed = typ == "WorkloadAdmitted", cohortOf[q], *committed
		recs = append(recs, r)
	}
	return recs, rows.Err()
}
