// Package domain is webhook notification's pure core (docs/api/webhooks.md):
// which task events notify and with what body, the Standard Webhooks
// signature, the retry schedule, and the checks on endpoints. Standard
// library only; the clock and randomness are passed in.
package domain

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/eventseq"
	"github.com/taskmesh/taskmesh/platform/domain/weburl"
)

// The statuses a notification reports: the task API's final states.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	// StatusCircuitOpen is a repeat's circuit-breaker alert: no run starts
	// until an operator resets it.
	StatusCircuitOpen = "circuit_open"
)

// EventKind is what a task event means to notifications.
type EventKind int

// The event kinds.
const (
	// Ignored events notify nothing; they still move the task's version.
	Ignored EventKind = iota
	// Spec sets the task's own endpoint (URL, "" = the tenant's default).
	Spec
	// Final ends the task (or the group) in Status.
	Final
	// Alert is a group's circuit-breaker alert.
	Alert
	// Gone: the group is deleted; its endpoint is forgotten.
	Gone
)

// Event is one task event as notifications read it.
type Event struct {
	EventID, TaskID, TenantID string
	Version                   int64
	At                        time.Time
	Kind                      EventKind
	URL                       string // Spec
	Status                    string // Final
	// Submission: the Spec event is the task's submission (not an update).
	Submission bool
}

// Task is what notifications keep per task.
type Task struct {
	TaskID, TenantID, URL string
	Version               int64
}

// What a delivery notifies (Delivery.Subject).
const (
	SubjectTask  = "task"
	SubjectGroup = "task_group"
)

// Delivery is one notification to send.
type Delivery struct {
	// ID is also the webhook-id header, the same for every attempt.
	ID, EventID, TenantID string
	// TaskID is the task's id, or the group's when Subject is SubjectGroup.
	TaskID  string
	Subject string
	Status  string
	// URL is the task's own endpoint; "" means the tenant's default.
	URL       string
	Body      string
	CreatedAt time.Time
}

// DeliveryID is the delivery id of the event that ended a task.
func DeliveryID(eventID string) string { return "msg_" + eventID }

// Body is the documented body, exactly: {"task_id":"…","status":"…"}.
func Body(taskID, status string) string {
	b, _ := json.Marshal(struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
	}{taskID, status}) // two strings cannot fail to marshal
	return string(b)
}

// GroupAlertBody is the body of a task group's alert:
// {"task_group_id":"…","status":"…"} (the task body's shape, the group's
// id under a key of its own).
func GroupAlertBody(groupID, status string) string {
	b, _ := json.Marshal(struct {
		GroupID string `json:"task_group_id"`
		Status  string `json:"status"`
	}{groupID, status}) // two strings cannot fail to marshal
	return string(b)
}

// CircuitOpened is the delivery of a repeat's circuit-breaker alert, to
// the tenant's default endpoint (a group has no endpoint of its own). Its
// TaskID is the group's id.
func CircuitOpened(eventID, tenantID, groupID string, at time.Time) Delivery {
	return Delivery{ID: DeliveryID(eventID), EventID: eventID, TenantID: tenantID, TaskID: groupID, Subject: SubjectGroup,
		Status: StatusCircuitOpen, Body: GroupAlertBody(groupID, StatusCircuitOpen), CreatedAt: at.UTC()}
}

// GroupEvent is one orchestration event as group notifications read it.
type GroupEvent struct {
	EventID, GroupID, TenantID string
	At                         time.Time
	Kind                       EventKind
	URL                        string // Spec: the group's own endpoint
	Status                     string // Final: completed, failed or cancelled
}

// GroupEnded is the one delivery of a group's end, to the group's own
// endpoint (url) or, without one, the tenant's default. Its TaskID is the
// group's id.
func GroupEnded(e GroupEvent, url string) Delivery {
	return Delivery{ID: DeliveryID(e.EventID), EventID: e.EventID, TenantID: e.TenantID, TaskID: e.GroupID, Subject: SubjectGroup,
		Status: e.Status, URL: url, Body: GroupAlertBody(e.GroupID, e.Status), CreatedAt: e.At.UTC()}
}

// Refuse reports why e cannot be the next event of the task whose state
// is t (nil when it can, or when it was seen before): the sequence rule of
// every read model (eventseq.Next, a submission creating the task). The
// consumer parks a refused event.
func Refuse(t Task, e Event) error {
	if _, err := eventseq.Next(t.Version, t.TenantID, eventseq.Event{Version: e.Version, Tenant: e.TenantID, Creates: e.Submission}); err != nil {
		return fmt.Errorf("webhooks: task %s: %w", e.TaskID, err)
	}
	return nil
}

// Fold applies e to t (zero for a new task): a spec event sets the task's
// endpoint, a final one makes its delivery. applied is false for an event
// at or below t's version (seen before), which then changes nothing.
func Fold(t Task, e Event) (next Task, d *Delivery, applied bool) {
	if e.Version <= t.Version {
		return t, nil, false
	}
	if t.TaskID == "" {
		t.TaskID, t.TenantID = e.TaskID, e.TenantID
	}
	t.Version = e.Version
	switch e.Kind {
	case Spec:
		t.URL = e.URL
	case Final:
		d = &Delivery{ID: DeliveryID(e.EventID), EventID: e.EventID, TenantID: t.TenantID, TaskID: t.TaskID, Subject: SubjectTask, Status: e.Status,
			URL: t.URL, Body: Body(t.TaskID, e.Status), CreatedAt: e.At.UTC()}
	}
	return t, d, true
}

// The header names of the Standard Webhooks signature.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// SecretBytes is the length of a new secret's key.
const SecretBytes = 32

// NewSecret renders a signing key as the tenant sees it: whsec_<base64>.
func NewSecret(key []byte) string { return SecretPrefix + base64.StdEncoding.EncodeToString(key) }

// ParseSecret returns the key of a whsec_ secret.
func ParseSecret(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
	if err != nil || !strings.HasPrefix(s, SecretPrefix) || len(b) == 0 {
		return nil, errors.New("not a whsec_ secret")
	}
	return b, nil
}

// Sign is the webhook-signature header of a message: "v1," and the
// base64 HMAC-SHA256, keyed with the secret's key, of
// "<webhook-id>.<webhook-timestamp>.<body>".
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Backoff is the retry schedule: the pause after the n-th failed attempt
// is Base·2^(n−1), at most Max, spread by ±Jitter (a fraction) so that
// receivers that failed together are not retried together; no attempt is
// made after a delivery's deadline (MaxAge after it was scheduled).
type Backoff struct {
	Base, Max, MaxAge time.Duration
	Jitter            float64
}

// DefaultBackoff retries for up to 24 hours: 5 s, 10 s, 20 s, … doubling to
// an hour between attempts.
var DefaultBackoff = Backoff{Base: 5 * time.Second, Max: time.Hour, MaxAge: 24 * time.Hour, Jitter: 0.2}

// Next is when to try again after failures failed attempts, with r a
// random number in [0, 1); ok is false when that would be past deadline
// (the delivery is dead).
func (b Backoff) Next(now time.Time, failures int, deadline time.Time, r float64) (time.Time, bool) {
	d := float64(b.Base) * math.Pow(2, float64(max(failures-1, 0)))
	d = math.Min(d, float64(b.Max))
	d *= 1 + b.Jitter*(2*r-1)
	next := now.Add(time.Duration(d))
	return next, !next.After(deadline)
}

// Delivered reports whether a receiver's status acknowledges a delivery.
func Delivered(httpStatus int) bool { return httpStatus >= 200 && httpStatus < 300 }

// Delivery states, as the API shows them.
const (
	StatePending   = "pending"
	StateSending   = "sending"
	StateDelivered = "delivered"
	StateDead      = "dead"
	StateSkipped   = "skipped"
)

// ErrInvalid is wrapped by every refusal of an argument.
var ErrInvalid = errors.New("invalid argument")

// InvalidError names the argument that is wrong.
type InvalidError struct{ Field, Reason string }

func (e *InvalidError) Error() string { return e.Field + " " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// MaxURL bounds an endpoint URL.
const MaxURL = 2048

// CheckURL accepts "" or an absolute http(s) URL with a host and no
// credentials, by the rule a task's webhook.url follows too (package
// weburl). Whether its address may be called is decided when it is called.
func CheckURL(field, raw string) error {
	if raw == "" {
		return nil
	}
	if problem := weburl.Problem(raw, MaxURL); problem != "" {
		return &InvalidError{field, problem}
	}
	return nil
}
