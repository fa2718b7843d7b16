package consumers_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/consumers/usage"
)

// A TaskSubmitted whose GPU quantity the edge would refuse (an exponent,
// NaN, a sign, a word, a number past the quantity range) is parked by the
// usage consumer, with its log line, and meters nothing — not even its
// attempt as CPU seconds; the records after it are metered, and the
// reports stay finite in JSON and CSV.
func TestUsageParksGPUQuantitiesTheEdgeRefuses(t *testing.T) {
	e := newEnv(t)
	logs := &logbuf.Buffer{}
	s := e.start(consumers.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	sc := newScript(t)
	at := func(sec int) time.Time { return day.Add(time.Duration(sec) * time.Second) }
	bad := []string{"1e308", "NaN", "-1000000", "lots", "99999999999999999999P"}
	var parked []string
	for i, q := range bad {
		task := fmt.Sprintf("forged-%d", i)
		ev := sc.add("acme", task, at(0), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
			ClusterQueue: "cq-acme", Spec: &taskv1.TaskSpec{Name: task, Resources: map[string]string{"nvidia.com/gpu": q}}}}})
		parked = append(parked, ev.GetEventId())
		sc.add("acme", task, at(1), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: "a1"}}})
		sc.add("acme", task, at(2), started("a1"))
		sc.add("acme", task, at(3602), succeeded("a1"))
	}
	sc.add("acme", "gpu", at(0), &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
		ClusterQueue: "cq-acme", Spec: &taskv1.TaskSpec{Name: "gpu", Resources: map[string]string{"nvidia.com/gpu": "2"}}}}})
	sc.add("acme", "gpu", at(10), started("a1"))
	sc.add("acme", "gpu", at(70), succeeded("a1"))
	sc.add("acme", "cpu", at(0), submitted(&taskv1.TaskSpec{Name: "cpu"}))
	sc.add("acme", "cpu", at(10), started("a1"))
	sc.add("acme", "cpu", at(40), succeeded("a1"))
	for _, r := range sc.records {
		r.Key = []byte("one-partition") // the good records come after the forged ones
	}
	e.produce(sc.records)

	eventually(t, "every record", func() bool { return e.usageApplied() >= int64(len(sc.records)) })
	l, err := s.deadLetters().ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{Service: "consumers"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range l.GetDeadLetters() {
		if d.GetProjection() != consumers.Usage {
			t.Errorf("parked by %s too: %v", d.GetProjection(), d)
			continue
		}
		got = append(got, d.GetEventId())
		if !strings.Contains(d.GetError(), "carries a value metering refuses") || !strings.Contains(d.GetError(), "nvidia.com/gpu") {
			t.Errorf("dead letter error %q", d.GetError())
		}
	}
	if strings.Join(got, " ") != strings.Join(parked, " ") {
		t.Errorf("parked %v, want the forged submissions %v", got, parked)
	}
	n := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="record parked as a dead letter"`) && strings.Contains(line, " projection=usage ") {
			n++
		}
	}
	if n != len(bad) {
		t.Errorf("%d log lines of a parked usage record, want %d:\n%s", n, len(bad), logs.String())
	}
	var tasks int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_tasks WHERE task_id LIKE 'forged-%'`).Scan(&tasks); err != nil || tasks != 0 {
		t.Errorf("%d usage_tasks rows of forged tasks, %v", tasks, err)
	}

	// 2 GPUs × 60 s and 30 CPU seconds, at the default prices.
	for _, c := range []context.Context{operator, tenantKey("acme")} {
		r, err := s.usage().GetUsage(c, &usagev1.GetUsageRequest{From: "2026-11-20", To: "2026-11-20", GroupBy: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(r)
		if err != nil || bytes.Contains(js, []byte("Infinity")) || bytes.Contains(js, []byte("NaN")) {
			t.Errorf("JSON %s, %v", js, err)
		}
		var csv strings.Builder
		if err := usage.WriteCSV(&csv, r); err != nil {
			t.Fatal(err)
		}
		want := "key,gpu_seconds,cpu_seconds,video_seconds,stage_seconds,items,amount,currency\n" +
			"acme,120,30,0,0,2,0.0963,USD\n" +
			"total,120,30,0,0,2,0.0963,USD\n"
		if csv.String() != want {
			t.Errorf("CSV =\n%s\nwant\n%s", csv.String(), want)
		}
	}
}
