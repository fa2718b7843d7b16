package consumers_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	"github.com/taskmesh/taskmesh/platform/consumer"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
)

const (
	envChild   = "TASKMESH_TEST_USAGE_CHILD"
	envDB      = "TASKMESH_TEST_USAGE_DB"
	envBrokers = "TASKMESH_TEST_USAGE_BROKERS"
)

// runChild is the usage consumer alone, in a process the test kills; a
// pause per record widens the window a kill lands mid-transaction in.
func runChild() int {
	ctx := context.Background()
	pool, err := pg.Open(ctx, pg.Config{URL: os.Getenv(envDB), Schema: consumers.Schema, MaxConns: 8})
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage child:", err)
		return 1
	}
	meter := consumers.UsageApply()
	slow := func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		time.Sleep(time.Duration(len(recs)) * 2 * time.Millisecond)
		return meter(ctx, tx, recs)
	}
	_ = consumer.New(pool, consumer.Config{Name: consumers.Usage, Topic: consumers.TaskTopic, Partitions: 4,
		Kafka: kafka.Config{Brokers: strings.Split(os.Getenv(envBrokers), ",")}, StandbyInterval: 50 * time.Millisecond}, slow).Run(ctx)
	return 0
}

func (e *env) startChild() (kill func()) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDB+"="+e.db.URL, envBrokers+"="+strings.Join(e.broker.Addrs(), ","))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	e.t.Cleanup(kill)
	return kill
}

func (e *env) usageApplied() int64 { return e.applied(consumers.Usage) }

// applied is how many records the named projection has applied (the sum
// of its stored offsets; the test topics start at offset 0).
func (e *env) applied(projection string) int64 {
	e.t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(next_offset), 0) FROM projection_offsets
		WHERE projection = $1`, projection).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

var day = time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)

// usageScript is the scripted workload of TestUsage. By hand:
//
//	100 GPU tasks of acme, 2 GPUs, admitted on flavor A100, 60 s each:  12 000 GPU s
//	 60 CPU tasks of globex, 10 s then retried for 30 s:                 2 400 CPU s
//	 30 text-to-video generations of acme (720P, 5 s), 2 GPUs, 30 s:      1 800 GPU s, 150 video s
//	 20 image-to-video generations of acme (1080P), 2 GPUs, failed at 12 s:  480 GPU s
//	 10 tasks of acme cancelled before they started:                          nothing
//	 10 conversion jobs of globex, stages onnx 20 s, bie 40 s, nef 10 s:        700 stage s
//	  1 task of globex with a stage's request id, its own, 5 s:                  5 CPU s
func usageScript(t *testing.T) *script {
	sc := newScript(t)
	at := func(sec int) time.Time { return day.Add(time.Duration(sec) * time.Second) }
	gpus := map[string]string{"nvidia.com/gpu": "2"}
	for i := range 100 {
		task := fmt.Sprintf("gpu-%03d", i)
		sc.add("acme", task, at(0), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
			Spec: &taskv1.TaskSpec{Name: task, Resources: gpus}, ClusterQueue: "cq-acme"}}})
		sc.add("acme", task, at(1), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Admitted{Admitted: &taskv1.TaskAdmitted{
			ClusterQueue: "cq-acme", Flavors: map[string]string{"nvidia.com/gpu": "A100"}}}})
		sc.add("acme", task, at(5), started("a1"))
		sc.add("acme", task, at(6), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Progress: 50}}})
		sc.add("acme", task, at(65), succeeded("a1"))
	}
	for i := range 60 {
		task := fmt.Sprintf("cpu-%03d", i)
		sc.add("globex", task, at(0), submitted(&taskv1.TaskSpec{Name: task}))
		sc.add("globex", task, at(10), started("a1"))
		sc.add("globex", task, at(20), failed("a1", true))
		sc.add("globex", task, at(20), retried())
		sc.add("globex", task, at(100), started("a2"))
		sc.add("globex", task, at(130), succeeded("a2"))
	}
	video := func(prefix, model, res string, n, ran int, ok bool) {
		for i := range n {
			task := fmt.Sprintf("%s-%03d", prefix, i)
			sc.add("acme", task, at(0), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
				ClusterQueue: "cq-video", Spec: &taskv1.TaskSpec{Name: task, Type: "video", Resources: gpus,
					Video: &taskv1.VideoParams{Model: model, Resolution: res, Duration: 5}}}}})
			sc.add("acme", task, at(200), started("a1"))
			if ok {
				sc.add("acme", task, at(200+ran), succeeded("a1"))
			} else {
				sc.add("acme", task, at(200+ran), failed("a1", false))
			}
		}
	}
	video("t2v", "wan2.2-t2v", "720P", 30, 30, true)
	video("i2v", "wan2.2-i2v", "1080P", 20, 12, false)
	for i := range 10 {
		task := fmt.Sprintf("never-%03d", i)
		sc.add("acme", task, at(0), submitted(&taskv1.TaskSpec{Name: task, Resources: gpus}))
		sc.add("acme", task, at(3), cancelled())
	}
	stageTask := func(task, actor, requestID, queue string, from, ran int) {
		sc.add("globex", task, at(from), &taskv1.TaskEvent{Actor: actor, Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
			RequestId: requestID, Spec: &taskv1.TaskSpec{Name: task, Queue: queue}}}})
		sc.add("globex", task, at(from+1), started("a1"))
		sc.add("globex", task, at(from+1+ran), succeeded("a1"))
	}
	for i := range 10 {
		job := fmt.Sprintf("job-%03d", i)
		stageTask(job+"-onnx", "pipeline", "pipeline/"+job+"/onnx", "pipeline-onnx", 300, 20)
		stageTask(job+"-bie", "pipeline", "pipeline/"+job+"/bie", "pipeline-bie", 330, 40)
		stageTask(job+"-nef", "pipeline", "pipeline/"+job+"/nef", "pipeline-nef", 380, 10)
	}
	stageTask("forged", "key-globex", "pipeline/job-000/onnx", "", 400, 5)
	return sc
}

type usageRow struct{ gpu, cpu, video, stage, amount float64 }

func rows(t *testing.T, s *service, groupBy string) map[string]usageRow {
	t.Helper()
	r, err := s.usage().GetUsage(operator, &usagev1.GetUsageRequest{From: "2026-11-20", To: "2026-11-20", GroupBy: groupBy})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]usageRow{}
	for _, x := range append(r.GetRows(), r.GetTotal()) {
		out[x.GetKey()] = usageRow{x.GetGpuSeconds(), x.GetCpuSeconds(), x.GetVideoSeconds(), x.GetStageSeconds(),
			math.Round(x.GetAmount()*1e6) / 1e6}
	}
	return out
}

// Usage of a scripted workload equals the hand computation, although the
// consumer was killed mid-batch again and again, and a full replay of it
// equals the live tables.
func TestUsageEqualsHandComputationThroughKillsAndReplay(t *testing.T) {
	e := newEnv(t)
	sc := usageScript(t)
	e.produce(sc.records)
	total := int64(len(sc.records))

	kill := e.startChild()
	for next := int64(150); next < total-100; next += 250 {
		eventually(t, "progress", func() bool { return e.usageApplied() >= next })
		kill()
		kill = e.startChild()
	}
	kill()
	s := e.start(consumers.Config{Prices: &consumers.Prices{Currency: "EUR", GPUSecond: 0.001,
		GPUSecondByFlavor: map[string]float64{"A100": 0.002}, CPUSecond: 0.0001, VideoSecond: 0.05, StageSecond: 0.001}})
	// The webhooks projection reads the same topic in its own loop; the
	// replay below compares it too, so it must have caught up as well.
	eventually(t, "every record", func() bool {
		return e.usageApplied() >= total && e.applied(consumers.Webhooks) >= total
	})

	all := usageRow{gpu: 14280, cpu: 2405, video: 150, stage: 700, amount: 34.7205}
	want := map[string]map[string]usageRow{
		"tenant": {
			"acme":   {gpu: 14280, video: 150, amount: 24 + 2.28 + 7.5},
			"globex": {cpu: 2405, stage: 700, amount: 0.2405 + 0.7},
			"total":  all,
		},
		"model": {
			"-":          {gpu: 12000, cpu: 2405, stage: 700, amount: 24 + 0.2405 + 0.7},
			"wan2.2-t2v": {gpu: 1800, video: 150, amount: 1.8 + 7.5},
			"wan2.2-i2v": {gpu: 480, amount: 0.48},
			"total":      all,
		},
		"queue": {
			"cq-acme":       {gpu: 12000, amount: 24},
			"cq-video":      {gpu: 2280, video: 150, amount: 9.78},
			"pipeline-onnx": {stage: 200, amount: 0.2},
			"pipeline-bie":  {stage: 400, amount: 0.4},
			"pipeline-nef":  {stage: 100, amount: 0.1},
			"-":             {cpu: 2405, amount: 0.2405},
			"total":         all,
		},
		"stage": {
			"onnx":  {stage: 200, amount: 0.2},
			"bie":   {stage: 400, amount: 0.4},
			"nef":   {stage: 100, amount: 0.1},
			"-":     {gpu: 14280, cpu: 2405, video: 150, amount: 34.0205},
			"total": all,
		},
		"day": {
			"2026-11-20": all,
			"total":      all,
		},
	}
	for groupBy, w := range want {
		got := rows(t, s, groupBy)
		if len(got) != len(w) {
			t.Errorf("group_by=%s: %v", groupBy, got)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("group_by=%s %s = %+v, want %+v", groupBy, k, got[k], v)
			}
		}
	}
	var records int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_records`).Scan(&records); err != nil || records != 100+120+60+20+30+1 {
		t.Errorf("%d usage records (want one per metered event: 331), %v", records, err)
	}

	// A tenant sees its own usage only.
	mine, err := s.usage().GetUsage(tenantKey("globex"), &usagev1.GetUsageRequest{From: "2026-11-20", To: "2026-11-20", GroupBy: "tenant"})
	if err != nil || len(mine.GetRows()) != 1 || mine.GetRows()[0].GetKey() != "globex" || mine.GetCurrency() != "EUR" {
		t.Errorf("globex's usage = %v, %v", mine, err)
	}
	if _, err := s.usage().GetUsage(tenantKey("globex"), &usagev1.GetUsageRequest{TenantId: "acme"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("globex asking for acme: %v", err)
	}
	if _, err := s.usage().GetUsage(operator, &usagev1.GetUsageRequest{GroupBy: "week"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad grouping: %v", err)
	}

	for _, spec := range consumers.ReplaySpecs(e.broker.Config()) {
		if spec.Name != consumers.Usage && spec.Name != consumers.Webhooks {
			continue
		}
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Equal() || rep.Records != total {
			t.Errorf("replay of %s = %+v", spec.Name, rep)
		}
	}
}

// The same record twice to the usage Apply (a dead letter retried, a
// replay into the live tables) meters it once.
func TestUsageApplyIsIdempotentByEvent(t *testing.T) {
	e := newEnv(t)
	sc := newScript(t)
	sc.add("acme", "t1", day, submitted(&taskv1.TaskSpec{Name: "t1"}))
	sc.add("acme", "t1", day, started("a"))
	sc.add("acme", "t1", day.Add(time.Minute), succeeded("a"))
	apply := consumers.UsageApply()
	for range 2 {
		for _, rec := range sc.records { // one at a time, then all at once below
			if err := pg.InTx(context.Background(), e.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				return apply(context.Background(), tx, []*kgo.Record{rec})
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := pg.InTx(context.Background(), e.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return apply(context.Background(), tx, sc.records)
	}); err != nil {
		t.Fatal(err)
	}
	var n int
	var qty float64
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*), sum(quantity) FROM usage_records`).Scan(&n, &qty); err != nil || n != 1 || qty != 60 {
		t.Errorf("records %d, quantity %v, %v", n, qty, err)
	}
	var env taskv1.TaskEvent
	_ = proto.Unmarshal(sc.records[2].Value, &env)
	if env.GetVersion() != 3 {
		t.Fatal("script versions")
	}
}
