// Package domain is usage metering's pure core: the fold of a task's
// lifecycle into metered quantities (Fold), and the pricing and grouping
// of the sums a report shows (docs/api/usage.md). Standard library only.
//
// What is metered, per tenant:
//
//   - GPU seconds: each attempt's running time (TaskStarted to the end of
//     the attempt) × the GPUs the task requested, under the task's queue
//     and the flavor admission gave it;
//   - CPU task seconds: the running time of attempts that asked for no GPU;
//   - video seconds: the duration of each video a generation produced
//     (TaskSucceeded of a video task), per model and resolution;
//   - stage seconds: the running time of the conversion pipeline's stage
//     tasks (the tasks the pipeline creates for a job's ONNX, BIE and NEF
//     stages), per stage, instead of CPU or GPU seconds.
//
// Every quantity is keyed by the event that produced it and derived from
// the events alone, so metering is exactly once per event however often a
// record is delivered, and a replay equals the live tables.
//
// No arithmetic here can reach Inf or NaN. Every factor is bounded: the
// GPUs a task requested are a quantity the edge accepts (finite,
// non-negative, below math.MaxInt64/1000, about 9.2e15; the consumer parks
// an event carrying another), running time is a time.Duration (at most
// about 9.2e9 s, never negative: see endAttempt), a video's duration an
// int32, and a price at most MaxPrice (Prices.Check). So one record is
// below 1e26, Postgres's float8 sum of any number of rows a table can hold
// stays far below the float64 range (and Postgres raises an error rather
// than overflow), and so do Rows' additions and the amounts (quantity ×
// price).
package domain

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/datebound"
	"github.com/taskmesh/taskmesh/platform/domain/eventseq"
)

// Kinds of metered quantity.
const (
	KindGPU   = "gpu"
	KindCPU   = "cpu"
	KindVideo = "video"
	KindStage = "stage"
)

// TypeVideo is the task type whose successes produce video seconds.
const TypeVideo = "video"

// EventKind is what a task event means to metering.
type EventKind int

// The event kinds.
const (
	// Ignored events change nothing metered (progress, renewals, …); they
	// still move the task's version.
	Ignored EventKind = iota
	// Submitted and Updated carry the spec.
	Submitted
	Updated
	// Admitted names the ClusterQueue and flavor.
	Admitted
	// Started begins an attempt's running time.
	Started
	// Succeeded ends the attempt and, for a video task, produces its video.
	Succeeded
	// AttemptEnded ends the running attempt in any other way (failed,
	// cancelled, preempted, suspended, lease expired).
	AttemptEnded
)

// Spec is what metering needs of a task's spec.
type Spec struct {
	Type string
	// GPUs requested (nvidia.com/gpu), 0 for CPU work.
	GPUs float64
	// Queue is the queue the task names ("" = its tenant's default).
	Queue        string
	ClusterQueue string
	Model        string
	Resolution   string
	// VideoSeconds is the duration of the video a generation produces.
	VideoSeconds float64
}

// Event is one task event as metering reads it.
type Event struct {
	EventID, TaskID, TenantID string
	Version                   int64
	At                        time.Time
	Kind                      EventKind
	Spec                      *Spec  // Submitted, Updated
	Stage                     string // Submitted: the pipeline stage the task runs, if it is one
	ClusterQueue, Flavor      string // Admitted
	AttemptID                 string // Started, Succeeded, AttemptEnded
	// EndedAt is when the attempt ended, when the event says (else At).
	EndedAt time.Time
}

// Task is the state metering keeps per task.
type Task struct {
	TaskID, TenantID string
	Version          int64
	Spec             Spec
	// Queue is the ClusterQueue admission used, else the named queue.
	Queue, Flavor string
	// Stage is the pipeline stage the task runs ("" for other tasks).
	Stage string
	// AttemptID and AttemptStarted describe the running attempt (zero
	// when none runs).
	AttemptID      string
	AttemptStarted time.Time
}

// Record is one metered quantity.
type Record struct {
	EventID, Kind, TenantID, TaskID         string
	At                                      time.Time
	Queue, Flavor, Model, Resolution, Stage string
	Quantity                                float64
}

// Refuse reports why e cannot be the next event of the task whose state
// is t (nil when it can, or when it was folded before): the sequence rule
// of every read model (eventseq.Next, a submission creating the task). The
// consumer parks a refused event.
func Refuse(t Task, e Event) error {
	if _, err := eventseq.Next(t.Version, t.TenantID, eventseq.Event{Version: e.Version, Tenant: e.TenantID, Creates: e.Kind == Submitted}); err != nil {
		return fmt.Errorf("usage: task %s: %w", e.TaskID, err)
	}
	return nil
}

// Fold applies e to the task's state t (zero when the task is new) and
// returns the new state and the quantities e produces; applied is false for
// an event at or below the state's version (delivered before), which then
// changes nothing.
//
// A task's first event is its TaskSubmitted (the topic keeps every event).
// One whose submission was never folded — parked as a dead letter because
// it did not decode or carried a value metering refuses — has no spec to
// meter by, so its later events change nothing either, rather than meter
// its running time as CPU seconds on a guess.
func Fold(t Task, e Event) (next Task, records []Record, applied bool) {
	if e.Version <= t.Version || (t.TaskID == "" && e.Kind != Submitted) {
		return t, nil, false
	}
	if t.TaskID == "" {
		t.TaskID, t.TenantID = e.TaskID, e.TenantID
	}
	t.Version = e.Version
	switch e.Kind {
	case Submitted, Updated:
		if e.Kind == Submitted {
			t.Stage = e.Stage
		}
		if e.Spec != nil {
			t.Spec = *e.Spec
			t.Queue = firstOf(e.Spec.ClusterQueue, e.Spec.Queue)
		}
	case Admitted:
		t.Queue = firstOf(e.ClusterQueue, t.Queue)
		t.Flavor = e.Flavor
	case Started:
		// Kept to the microsecond, as stored: a fold that reads the start
		// back from the table and one that still holds it in memory (both
		// events in one batch) meter the same seconds.
		t.AttemptID, t.AttemptStarted = e.AttemptID, e.At.Truncate(time.Microsecond)
	case Succeeded, AttemptEnded:
		records = append(records, t.endAttempt(e)...)
		if e.Kind == Succeeded && t.Spec.Type == TypeVideo && t.Spec.VideoSeconds > 0 {
			records = append(records, t.record(e, KindVideo, t.Spec.VideoSeconds))
		}
	}
	return t, records, true
}

// endAttempt meters the running attempt, if e ends it.
func (t *Task) endAttempt(e Event) []Record {
	if t.AttemptStarted.IsZero() || (e.AttemptID != "" && t.AttemptID != "" && e.AttemptID != t.AttemptID) {
		return nil
	}
	end := e.EndedAt
	if end.IsZero() {
		end = e.At
	}
	secs := math.Max(0, end.Truncate(time.Microsecond).Sub(t.AttemptStarted).Seconds())
	t.AttemptID, t.AttemptStarted = "", time.Time{}
	switch {
	case t.Stage != "":
		return []Record{t.record(e, KindStage, secs)}
	case t.Spec.GPUs > 0:
		return []Record{t.record(e, KindGPU, secs*t.Spec.GPUs)}
	}
	return []Record{t.record(e, KindCPU, secs)}
}

func (t Task) record(e Event, kind string, qty float64) Record {
	r := Record{EventID: e.EventID, Kind: kind, TenantID: t.TenantID, TaskID: t.TaskID, At: e.At.UTC(),
		Queue: t.Queue, Flavor: t.Flavor, Stage: t.Stage, Quantity: qty}
	if t.Spec.Type == TypeVideo {
		r.Model, r.Resolution = t.Spec.Model, t.Spec.Resolution
	}
	return r
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Prices is the price table: an amount per metered second, with overrides
// per GPU flavor and per video model (or model/resolution).
type Prices struct {
	Currency          string             `json:"currency"`
	GPUSecond         float64            `json:"gpu_second"`
	GPUSecondByFlavor map[string]float64 `json:"gpu_second_by_flavor,omitempty"`
	CPUSecond         float64            `json:"cpu_second"`
	VideoSecond       float64            `json:"video_second"`
	// VideoSecondByModel is keyed by model ("wan2.2-t2v") or model and
	// resolution ("wan2.2-t2v/1080P"), the latter winning.
	VideoSecondByModel map[string]float64 `json:"video_second_by_model,omitempty"`
	StageSecond        float64            `json:"stage_second"`
	// StageSecondByStage is keyed by pipeline stage ("onnx", "bie", "nef").
	StageSecondByStage map[string]float64 `json:"stage_second_by_stage,omitempty"`
}

// DefaultPrices are used without a configured table.
var DefaultPrices = Prices{Currency: "USD", GPUSecond: 0.0008, CPUSecond: 0.00001, VideoSecond: 0.05, StageSecond: 0.0001}

// MaxPrice bounds a price per second, far above any real one, so that an
// amount (a sum × a price) stays finite (see the package comment).
const MaxPrice = 1e6

// Check refuses a table with no currency, or a price that is negative,
// not a number or above MaxPrice.
func (p Prices) Check() error {
	if strings.TrimSpace(p.Currency) == "" {
		return errors.New("price table: currency is empty")
	}
	all := []float64{p.GPUSecond, p.CPUSecond, p.VideoSecond, p.StageSecond}
	for _, m := range []map[string]float64{p.GPUSecondByFlavor, p.VideoSecondByModel, p.StageSecondByStage} {
		for _, v := range m {
			all = append(all, v)
		}
	}
	for _, v := range all {
		if v < 0 || math.IsNaN(v) || v > MaxPrice {
			return fmt.Errorf("price table: %v is not a price (0 to %g per second)", v, float64(MaxPrice))
		}
	}
	return nil
}

// Amount prices a sum's quantity, by its kind and the flavor, model,
// resolution or stage its price may depend on.
func (p Prices) Amount(s Sum) float64 {
	price := 0.0
	switch s.Kind {
	case KindGPU:
		price = p.GPUSecond
		if v, ok := p.GPUSecondByFlavor[s.Flavor]; ok {
			price = v
		}
	case KindCPU:
		price = p.CPUSecond
	case KindVideo:
		price = p.VideoSecond
		if v, ok := p.VideoSecondByModel[s.Model]; ok {
			price = v
		}
		if v, ok := p.VideoSecondByModel[s.Model+"/"+s.Resolution]; ok {
			price = v
		}
	case KindStage:
		price = p.StageSecond
		if v, ok := p.StageSecondByStage[s.Stage]; ok {
			price = v
		}
	}
	return s.Quantity * price
}

// Groupings of a report.
const (
	ByDay    = "day"
	ByModel  = "model"
	ByQueue  = "queue"
	ByFlavor = "flavor"
	ByTenant = "tenant"
	ByStage  = "stage"
)

// ErrInvalid is wrapped by every refusal of a report request.
var ErrInvalid = errors.New("invalid argument")

// InvalidError names the parameter that is wrong.
type InvalidError struct{ Field, Reason string }

func (e *InvalidError) Error() string { return e.Field + " " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Query is a validated report request: usage at From ≤ at < Until, grouped
// by GroupBy, of Tenant ("" = every tenant: operators only).
type Query struct {
	From, Until time.Time
	GroupBy     string
	Tenant      string
}

// MaxRange bounds a report's range.
const MaxRange = 366 * 24 * time.Hour

// ParseQuery reads a report request at now: from and to are YYYY-MM-DD (a
// whole day, UTC) or RFC 3339, both inclusive; from defaults to the first
// day of now's month, to to now. A tenant's caller (tenant != "") may not
// name another tenant.
func ParseQuery(from, to, groupBy, tenantFilter, tenant string, operator bool, now time.Time) (Query, error) {
	now = now.UTC()
	q := Query{GroupBy: groupBy}
	if q.GroupBy == "" {
		q.GroupBy = ByDay
	}
	switch q.GroupBy {
	case ByDay, ByModel, ByQueue, ByFlavor, ByTenant, ByStage:
	default:
		return q, &InvalidError{"group_by", fmt.Sprintf("must be day, model, queue, flavor, tenant or stage, not %q", groupBy)}
	}
	var err error
	if q.From, err = datebound.Parse(from, false); err != nil {
		return q, &InvalidError{"from", err.Error()}
	}
	if q.Until, err = datebound.Parse(to, true); err != nil {
		return q, &InvalidError{"to", err.Error()}
	}
	if q.From.IsZero() {
		q.From = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	if q.Until.IsZero() {
		q.Until = now.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	switch {
	case !q.From.Before(q.Until):
		return q, &InvalidError{"from", "is after to"}
	case q.Until.Sub(q.From) > MaxRange:
		return q, &InvalidError{"to", "is more than 366 days after from"}
	}
	switch {
	case operator:
		q.Tenant = tenantFilter
	case tenantFilter != "" && tenantFilter != tenant:
		return q, &InvalidError{"tenant_id", "is for operator keys; an API key sees its own tenant's usage"}
	default:
		q.Tenant = tenant
	}
	return q, nil
}

// Sum is the quantity of one kind in one group, as stored records add up
// (separately per flavor, model, resolution and stage, which prices may
// depend on).
type Sum struct {
	Key, Kind, Flavor, Model, Resolution, Stage string
	Quantity                                    float64
	Items                                       int64
}

// Row is one group of a report.
type Row struct {
	Key                                                string
	GPUSeconds, CPUSeconds, VideoSeconds, StageSeconds float64
	Amount                                             float64
	Items                                              int64
}

// NoKey shows a group without a value (the model of a shell task).
const NoKey = "-"

// Rows prices sums and gathers them per key, ordered by key, with their
// total.
func Rows(sums []Sum, p Prices) ([]Row, Row) {
	byKey := map[string]*Row{}
	total := Row{Key: "total"}
	for _, s := range sums {
		key := s.Key
		if key == "" {
			key = NoKey
		}
		r := byKey[key]
		if r == nil {
			r = &Row{Key: key}
			byKey[key] = r
		}
		amount := p.Amount(s)
		for _, x := range []*Row{r, &total} {
			switch s.Kind {
			case KindGPU:
				x.GPUSeconds += s.Quantity
			case KindCPU:
				x.CPUSeconds += s.Quantity
			case KindVideo:
				x.VideoSeconds += s.Quantity
			case KindStage:
				x.StageSeconds += s.Quantity
			}
			x.Amount += amount
			x.Items += s.Items
		}
	}
	rows := make([]Row, 0, len(byKey))
	for _, r := range byKey {
		rows = append(rows, r.rounded())
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows, total.rounded()
}

// rounded takes the float noise of its sums off r: quantities are
// recorded to the microsecond, so their sums are too (0.213128, not
// 0.21312799999999998), and amounts are shown to 1e-12 of the currency,
// below any price's precision.
func (r Row) rounded() Row {
	for _, x := range []*float64{&r.GPUSeconds, &r.CPUSeconds, &r.VideoSeconds, &r.StageSeconds} {
		*x = math.Round(*x*1e6) / 1e6
	}
	r.Amount = math.Round(r.Amount*1e12) / 1e12
	return r
}
