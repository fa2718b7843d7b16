package domain

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func ev(v int64, sec int, kind EventKind) Event {
	return Event{EventID: "ev-" + string(rune('a'+v)), TaskID: "task-1", TenantID: "acme", Version: v, At: at(sec), Kind: kind}
}

// fold folds events in order and returns every record.
func fold(events ...Event) (Task, []Record) {
	var t Task
	var all []Record
	for _, e := range events {
		var recs []Record
		t, recs, _ = Fold(t, e)
		all = append(all, recs...)
	}
	return t, all
}

func TestFoldMetersAttempts(t *testing.T) {
	gpu := ev(1, 0, Submitted)
	gpu.Spec = &Spec{Type: "shell", GPUs: 2, Queue: "tenant-high-priority-queue"}
	admitted := ev(2, 1, Admitted)
	admitted.ClusterQueue, admitted.Flavor = "cq-premium", "A100"
	started := ev(3, 10, Started)
	started.AttemptID = "a1"
	failed := ev(4, 70, AttemptEnded)
	failed.AttemptID, failed.EndedAt = "a1", at(40) // the agent's end time wins
	restarted := ev(6, 100, Started)
	restarted.AttemptID = "a2"
	done := ev(7, 130, Succeeded)
	done.AttemptID = "a2"
	task, recs := fold(gpu, admitted, started, failed, ev(5, 80, Ignored), restarted, done)
	want := []Record{
		{EventID: "ev-e", Kind: KindGPU, TenantID: "acme", TaskID: "task-1", At: at(70), Queue: "cq-premium", Flavor: "A100", Quantity: 60},
		{EventID: "ev-h", Kind: KindGPU, TenantID: "acme", TaskID: "task-1", At: at(130), Queue: "cq-premium", Flavor: "A100", Quantity: 60},
	}
	if len(recs) != 2 || recs[0] != want[0] || recs[1] != want[1] {
		t.Fatalf("records = %+v\nwant %+v", recs, want)
	}
	if task.Version != 7 || !task.AttemptStarted.IsZero() {
		t.Errorf("task after = %+v", task)
	}
	// Every event again: nothing more (a redelivery or a replay).
	for _, e := range []Event{gpu, admitted, started, failed, restarted, done} {
		if _, recs, applied := Fold(task, e); applied || len(recs) != 0 {
			t.Errorf("v%d applied again: %+v", e.Version, recs)
		}
	}
}

// A task whose TaskSubmitted was parked (never folded) has no spec: its
// attempts are not metered as CPU seconds, or as anything.
func TestFoldMetersNothingWithoutTheSubmission(t *testing.T) {
	start := ev(2, 5, Started)
	start.AttemptID = "a1"
	done := ev(3, 65, Succeeded)
	done.AttemptID = "a1"
	if task, recs := fold(start, done); len(recs) != 0 || task.TaskID != "" {
		t.Errorf("without the submission: %+v, %+v", task, recs)
	}
}

func TestFoldMetersCPUAndVideo(t *testing.T) {
	cpu := ev(1, 0, Submitted)
	cpu.Spec = &Spec{Type: "shell"}
	start := ev(2, 5, Started)
	cancel := ev(3, 8, AttemptEnded) // cancelled while running
	_, recs := fold(cpu, start, cancel)
	if len(recs) != 1 || recs[0].Kind != KindCPU || recs[0].Quantity != 3 {
		t.Errorf("cpu = %+v", recs)
	}
	// A cancel of a task that never started meters nothing.
	if _, recs := fold(cpu, ev(2, 5, AttemptEnded)); len(recs) != 0 {
		t.Errorf("never started = %+v", recs)
	}

	video := ev(1, 0, Submitted)
	video.Spec = &Spec{Type: TypeVideo, GPUs: 2, Model: "wan2.2-t2v", Resolution: "720P", VideoSeconds: 5, ClusterQueue: "cq"}
	done := ev(3, 42, Succeeded)
	_, recs = fold(video, ev(2, 12, Started), done)
	if len(recs) != 2 || recs[0].Kind != KindGPU || recs[0].Quantity != 60 || recs[0].Model != "wan2.2-t2v" ||
		recs[1].Kind != KindVideo || recs[1].Quantity != 5 || recs[1].Resolution != "720P" || recs[1].Queue != "cq" {
		t.Errorf("video = %+v", recs)
	}
	// A failed generation produces no video.
	_, recs = fold(video, ev(2, 12, Started), ev(3, 20, AttemptEnded))
	if len(recs) != 1 || recs[0].Kind != KindGPU {
		t.Errorf("failed video = %+v", recs)
	}
}

// A pipeline stage task's running time is stage seconds, under its
// stage, whatever resources it asked for; an update keeps the stage.
func TestFoldMetersPipelineStages(t *testing.T) {
	sub := ev(1, 0, Submitted)
	sub.Spec, sub.Stage = &Spec{Type: "shell", Queue: "pipeline-bie"}, "bie"
	upd := ev(2, 1, Updated)
	upd.Spec = &Spec{Type: "shell", Queue: "pipeline-bie", GPUs: 1}
	task, recs := fold(sub, upd, ev(3, 10, Started), ev(4, 25, Succeeded))
	if len(recs) != 1 || recs[0].Kind != KindStage || recs[0].Quantity != 15 || recs[0].Stage != "bie" ||
		recs[0].Queue != "pipeline-bie" || task.Stage != "bie" {
		t.Fatalf("stage = %+v, task %+v", recs, task)
	}
	p := Prices{Currency: "USD", StageSecond: 0.01, StageSecondByStage: map[string]float64{"bie": 0.02}}
	if a := p.Amount(Sum{Kind: KindStage, Stage: "bie", Quantity: 15}); math.Abs(a-0.3) > 1e-9 {
		t.Errorf("bie amount = %v", a)
	}
	if a := p.Amount(Sum{Kind: KindStage, Stage: "nef", Quantity: 15}); math.Abs(a-0.15) > 1e-9 {
		t.Errorf("nef amount = %v", a)
	}
}

func TestPricesAndRows(t *testing.T) {
	p := Prices{Currency: "EUR", GPUSecond: 0.001, GPUSecondByFlavor: map[string]float64{"H100": 0.002}, CPUSecond: 0.0001,
		VideoSecond: 0.05, VideoSecondByModel: map[string]float64{"wan2.2-i2v": 0.06, "wan2.2-i2v/1080P": 0.1}}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	sums := []Sum{
		{Key: "2026-11-22", Kind: KindGPU, Flavor: "A100", Quantity: 1000, Items: 2},
		{Key: "2026-11-22", Kind: KindGPU, Flavor: "H100", Quantity: 1000, Items: 1},
		{Key: "2026-11-21", Kind: KindCPU, Quantity: 500, Items: 5},
		{Key: "2026-11-21", Kind: KindVideo, Model: "wan2.2-i2v", Resolution: "1080P", Quantity: 10, Items: 2},
		{Key: "2026-11-21", Kind: KindVideo, Model: "wan2.2-i2v", Resolution: "480P", Quantity: 5, Items: 1},
		{Key: "", Kind: KindVideo, Model: "wan2.2-t2v", Quantity: 5, Items: 1},
	}
	rows, total := Rows(sums, p)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if len(rows) != 3 || rows[0].Key != NoKey || rows[1].Key != "2026-11-21" || rows[2].Key != "2026-11-22" {
		t.Fatalf("rows = %+v", rows)
	}
	if r := rows[2]; r.GPUSeconds != 2000 || !near(r.Amount, 3) || r.Items != 3 {
		t.Errorf("22 Nov = %+v", r)
	}
	if r := rows[1]; r.CPUSeconds != 500 || r.VideoSeconds != 15 || !near(r.Amount, 0.05+1+0.3) {
		t.Errorf("21 Nov = %+v", r)
	}
	if !near(total.Amount, 3+1.35+0.25) || total.Items != 12 || total.GPUSeconds != 2000 {
		t.Errorf("total = %+v", total)
	}
	for _, bad := range []Prices{{}, {Currency: "USD", GPUSecond: -1}, {Currency: "USD", VideoSecondByModel: map[string]float64{"m": math.NaN()}},
		{Currency: "USD", CPUSecond: math.Inf(1)}, {Currency: "USD", StageSecondByStage: map[string]float64{"bie": MaxPrice * 2}}} {
		if bad.Check() == nil {
			t.Errorf("%+v passed", bad)
		}
	}
}

// The largest quantities the bounds allow — the most GPUs a quantity the
// edge accepts can ask for, running for the longest time.Duration, in
// more rows than a table holds — priced at MaxPrice stay finite.
func TestExtremesStayFinite(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	task := Task{TaskID: "t", TenantID: "acme", Version: 3, Spec: Spec{GPUs: float64(math.MaxInt64 / 1000)},
		AttemptID: "a", AttemptStarted: start}
	_, recs, _ := Fold(task, Event{TaskID: "t", Version: 4, Kind: Succeeded, AttemptID: "a", At: start,
		EndedAt: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)})
	if len(recs) != 1 || recs[0].Kind != KindGPU || math.IsInf(recs[0].Quantity, 0) || recs[0].Quantity > 1e26 {
		t.Fatalf("records = %+v", recs)
	}
	p := Prices{Currency: "USD", GPUSecond: MaxPrice}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	var sums []Sum
	for i := range 1000 {
		sums = append(sums, Sum{Key: fmt.Sprint(i % 3), Kind: KindGPU, Quantity: recs[0].Quantity * 1e18, Items: 1e15})
	}
	rows, total := Rows(sums, p)
	for _, r := range append(rows, total) {
		for _, v := range []float64{r.GPUSeconds, r.Amount} {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				t.Errorf("row %+v is not finite", r)
			}
		}
	}
}

func TestParseQuery(t *testing.T) {
	now := time.Date(2026, 11, 22, 15, 4, 5, 0, time.UTC)
	q, err := ParseQuery("", "", "", "", "acme", false, now)
	if err != nil || !q.From.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) || !q.Until.After(now) || q.GroupBy != ByDay || q.Tenant != "acme" {
		t.Fatalf("defaults = %+v, %v", q, err)
	}
	q, err = ParseQuery("2026-10-01", "2026-10-31", "model", "globex", "", true, now)
	if err != nil || !q.Until.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) || q.Tenant != "globex" || q.GroupBy != ByModel {
		t.Errorf("operator query = %+v, %v", q, err)
	}
	if q, err = ParseQuery("", "", "stage", "", "acme", false, now); err != nil || q.GroupBy != ByStage {
		t.Errorf("stage = %+v, %v", q, err)
	}
	for name, args := range map[string][4]string{
		"group":  {"", "", "hour", ""},
		"from":   {"someday", "", "", ""},
		"order":  {"2026-11-02", "2026-11-01", "", ""},
		"range":  {"2024-01-01", "2026-01-01", "", ""},
		"tenant": {"", "", "", "globex"},
	} {
		_, err := ParseQuery(args[0], args[1], args[2], args[3], "acme", false, now)
		var ie *InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A start held in memory and one read back from Postgres (microseconds)
// meter the same seconds.
func TestFoldKeepsMicroseconds(t *testing.T) {
	sub := ev(1, 0, Submitted)
	sub.Spec = &Spec{Type: "shell"}
	started := ev(2, 1, Started)
	started.At = started.At.Add(123456789 * time.Nanosecond)
	done := ev(3, 2, Succeeded)
	done.At = done.At.Add(999 * time.Nanosecond)
	task, _ := fold(sub, started)
	stored := task
	stored.AttemptStarted = time.UnixMicro(task.AttemptStarted.UnixMicro()).UTC()
	_, inMemory, _ := Fold(task, done)
	_, readBack, _ := Fold(stored, done)
	if len(inMemory) != 1 || len(readBack) != 1 || inMemory[0].Quantity != readBack[0].Quantity ||
		inMemory[0].Quantity != 1-0.123456 {
		t.Fatalf("in memory %+v, read back %+v", inMemory, readBack)
	}
}

// Refuse: the sequence rule, and a submission only as version 1.
func TestRefuseEventsOutOfSequence(t *testing.T) {
	task := Task{TaskID: "t", TenantID: "acme", Version: 2}
	for _, tt := range []struct {
		name    string
		t       Task
		e       Event
		refused bool
	}{
		{"the next", task, Event{TaskID: "t", TenantID: "acme", Version: 3, Kind: Started}, false},
		{"seen before", task, Event{TaskID: "t", TenantID: "acme", Version: 2, Kind: Started}, false},
		{"a first submission", Task{}, Event{TaskID: "t", TenantID: "acme", Version: 1, Kind: Submitted}, false},
		{"a gap", task, Event{TaskID: "t", TenantID: "acme", Version: 9, Kind: Succeeded}, true},
		{"version 0", task, Event{TaskID: "t", TenantID: "acme", Version: 0, Kind: Succeeded}, true},
		{"another tenant's", task, Event{TaskID: "t", TenantID: "globex", Version: 3, Kind: Succeeded}, true},
		{"a submission later", task, Event{TaskID: "t", TenantID: "acme", Version: 3, Kind: Submitted}, true},
	} {
		if err := Refuse(tt.t, tt.e); (err != nil) != tt.refused {
			t.Errorf("%s: Refuse = %v, want refused %v", tt.name, err, tt.refused)
		}
	}
}

// Sums of microsecond quantities are shown to the microsecond, and their
// amounts to 1e-12, without float noise: three stage attempts of 0.070001,
// 0.071063 and 0.072064 s add up to 0.213128 s, not 0.21312799999999998.
func TestRowsShowSumsWithoutFloatNoise(t *testing.T) {
	sums := []Sum{
		{Key: "bie", Kind: KindStage, Stage: "bie", Quantity: 0.070001, Items: 1},
		{Key: "bie", Kind: KindStage, Stage: "bie", Quantity: 0.071063, Items: 1},
		{Key: "nef", Kind: KindStage, Stage: "nef", Quantity: 0.072064, Items: 1},
	}
	noisy := 0.0
	for _, s := range sums {
		noisy += s.Quantity
	}
	if fmt.Sprint(noisy) == "0.213128" {
		t.Fatal("the example has no float noise to take off")
	}
	rows, total := Rows(sums, Prices{StageSecond: 0.0001})
	if got := fmt.Sprint(total.StageSeconds, " ", total.Amount); got != "0.213128 2.13128e-05" {
		t.Errorf("total: %s, want 0.213128 2.13128e-05", got)
	}
	if len(rows) != 2 || fmt.Sprint(rows[0].StageSeconds) != "0.141064" || rows[0].Items != 2 || fmt.Sprint(rows[1].StageSeconds) != "0.072064" {
		t.Errorf("rows: %+v", rows)
	}
}
