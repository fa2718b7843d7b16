// Package domain is the audit log's pure core: what an entry is, how a
// caller's filter is read (the task API's query, docs/api/audit.md), and
// the retention policy. Standard library only; the clock is passed in.
package domain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/datebound"
)

// Entry is one audit log entry (the task API's AuditLog fields, plus the
// tenant it belongs to and the version of its event).
type Entry struct {
	// ID is the id of the event the entry records.
	ID string
	At time.Time
	// Version is the event's version within its aggregate (the task, the
	// group, the quota, …): the order in which that resource's events were
	// recorded, which orders its entries of one timestamp.
	Version    int64
	TenantID   string
	Action     string // resource.verb, e.g. task.created
	Resource   string
	ResourceID string
	UserID     string
	MachineID  string
	// Details is a JSON object.
	Details string
	IP      string
}

// Resources are the kinds of things audited; an action is one of these, a
// dot and a verb.
var Resources = []string{"task", "task_group", "template", "job", "tenant", "cluster", "quota", "cluster_queue", "cohort", "local_queue",
	"tenant_account", "api_key", "admin_key", "agent"}

func knownResource(r string) bool {
	for _, k := range Resources {
		if k == r {
			return true
		}
	}
	return false
}

// ErrInvalid is wrapped by every refusal of a query.
var ErrInvalid = errors.New("invalid argument")

// InvalidError names the parameter that is wrong.
type InvalidError struct{ Field, Reason string }

func (e *InvalidError) Error() string { return e.Field + " " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Scope is whose entries a caller may read: one tenant's, or every
// tenant's (AllTenants, operators).
type Scope struct {
	Tenant     string
	AllTenants bool
}

// QueryInput is a list request as received.
type QueryInput struct {
	Resource, Action, ResourceID, UserID, From, To, TenantID string
	PageSize                                                 int
	PageToken                                                string
}

// Query is a validated list request.
type Query struct {
	Resource, ResourceID, UserID string
	// Action is a full action (task.created); with ActionVerb set instead
	// it matches that verb of every resource (action=created alone).
	Action, ActionVerb string
	// From is inclusive, Until exclusive; zero: unbounded.
	From, Until time.Time
	// Tenant restricts to one tenant; "" (operators only): every tenant.
	Tenant   string
	PageSize int
	// After continues a listing after this entry (newest first).
	After *Cursor
}

// Cursor is the position of an entry in the listing order: newest first,
// by timestamp, then by version (of one resource's entries with the same
// timestamp, the later event first: the event log's order), then by id
// (entries of different resources with the same timestamp and version),
// all descending (docs/api/audit.md#order). It depends on the event
// alone, so a replay lists the same order.
type Cursor struct {
	At      time.Time
	Version int64
	ID      string
}

// Cursor is e's position in the listing order.
func (e Entry) Cursor() Cursor { return Cursor{At: e.At, Version: e.Version, ID: e.ID} }

// Token is the page token that continues after c.
func (c Cursor) Token() string {
	return strconv.FormatInt(c.At.UnixNano(), 10) + "_" + strconv.FormatInt(c.Version, 10) + "_" + c.ID
}

func parseToken(s string) (*Cursor, error) {
	ns, rest, ok1 := strings.Cut(s, "_")
	vs, id, ok2 := strings.Cut(rest, "_")
	n, err1 := strconv.ParseInt(ns, 10, 64)
	v, err2 := strconv.ParseInt(vs, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || id == "" {
		return nil, invalid("page_token", "is not one this API gave")
	}
	return &Cursor{At: time.Unix(0, n).UTC(), Version: v, ID: id}, nil
}

// Page sizes.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// ParseQuery validates in for a caller of scope. action=created with
// resource=task means task.created; action=created alone matches the verb
// of every resource; a full action names its resource itself. Dates are
// YYYY-MM-DD (a whole day, UTC) or RFC 3339; both bounds are inclusive.
func ParseQuery(in QueryInput, scope Scope) (Query, error) {
	q := Query{Resource: strings.TrimSpace(in.Resource), ResourceID: in.ResourceID, UserID: in.UserID, PageSize: in.PageSize}
	if q.Resource != "" && !knownResource(q.Resource) {
		return q, invalid("resource", "must be one of %s, not %q", strings.Join(Resources, ", "), q.Resource)
	}
	switch action := strings.TrimSpace(in.Action); {
	case action == "":
	case strings.Contains(action, "."):
		res, verb, _ := strings.Cut(action, ".")
		if !knownResource(res) || verb == "" {
			return q, invalid("action", "%q is not resource.verb with a known resource", action)
		}
		if q.Resource != "" && q.Resource != res {
			return q, invalid("action", "%q is not an action of resource %q", action, q.Resource)
		}
		q.Action = action
	case q.Resource != "":
		q.Action = q.Resource + "." + action
	default:
		q.ActionVerb = action
	}
	var err error
	if q.From, err = datebound.Parse(in.From, false); err != nil {
		return q, invalid("from", "%v", err)
	}
	if q.Until, err = datebound.Parse(in.To, true); err != nil {
		return q, invalid("to", "%v", err)
	}
	if !q.From.IsZero() && !q.Until.IsZero() && !q.From.Before(q.Until) {
		return q, invalid("from", "is after to")
	}
	switch {
	case q.PageSize == 0:
		q.PageSize = DefaultPageSize
	case q.PageSize < 0 || q.PageSize > MaxPageSize:
		return q, invalid("page_size", "must be 1 to %d", MaxPageSize)
	}
	if in.PageToken != "" {
		if q.After, err = parseToken(in.PageToken); err != nil {
			return q, err
		}
	}
	switch {
	case scope.AllTenants:
		q.Tenant = in.TenantID
	case in.TenantID != "" && in.TenantID != scope.Tenant:
		// Another tenant's entries do not exist for this caller.
		return q, invalid("tenant_id", "is for operator keys; an API key sees its own tenant's entries")
	default:
		q.Tenant = scope.Tenant
	}
	return q, nil
}

// Retention is the document's audit block: how long entries stay in the
// database, and whether expired ones are archived (to the object store) and
// compressed there.
type Retention struct {
	Keep     time.Duration
	Archive  bool
	Compress bool
}

// DefaultRetention is `audit: {retention: 90d, archive: true, compress: true}`.
var DefaultRetention = Retention{Keep: 90 * 24 * time.Hour, Archive: true, Compress: true}

// ParseRetention reads a retention such as 90d, 36h or 1d12h (days, hours,
// minutes); at least one hour.
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var total time.Duration
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("retention %q: want e.g. 90d or 36h", s)
		}
		total, s = time.Duration(n)*24*time.Hour, rest
	}
	if s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("retention %q: want e.g. 90d or 36h", s)
		}
		total += d
	}
	if total < time.Hour {
		return 0, fmt.Errorf("retention %s: at least 1h", total)
	}
	return total, nil
}

// Cutoff is the time before which entries have expired at now.
func (r Retention) Cutoff(now time.Time) time.Time { return now.Add(-r.Keep).UTC() }
