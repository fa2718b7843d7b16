package app

import (
	"context"
	"errors"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// The interfaces below are what the orchestration use cases need from
// storage. The Postgres adapter implements them (package
// adapters/postgres); the recording fake of package apptest implements
// them in memory, and apptest's contract suite holds both to the same
// behaviour.

// Scope says which members a store loads with a group.
type Scope int

const (
	// Open loads the members that are not final: enough for every
	// command but Delete (see orch.State), and cheap for a repeat that
	// has run many times.
	Open Scope = iota
	// All loads every member.
	All
)

// GroupStore keeps the task-group aggregate: its events and, written with
// them, the group row and its member rows (the inline projection), and
// the member tasks a decision creates, cancels or deletes — all in one
// transaction, so a member can never get two tasks and a group never
// records a decision its tasks do not reflect.
type GroupStore interface {
	// Create stores a new group: n's records, the state after them, and
	// the tasks of the members it released. With a RequestID the tenant
	// already used it stores nothing and returns that group (with every
	// member); a concurrent duplicate waits for the first to commit. A
	// definition too large to record is a *task.InvalidError.
	Create(ctx context.Context, n NewGroup) (orch.State, []task.Task, error)

	// Get returns a group of tenant ("*": of any tenant) with the members
	// of scope. Another tenant's group, a deleted one and an unknown id are
	// task.ErrNotFound.
	Get(ctx context.Context, tenant, id string, scope Scope) (orch.State, error)

	// Changed returns a group of tenant ("*": of any tenant) with the
	// members that changed after its version since (orch.Member.Version):
	// what a watcher that has the group as of since needs. Errors as Get.
	Changed(ctx context.Context, tenant, id string, since int64) (orch.State, error)

	// List returns a page of tenant's groups (without members), newest
	// first, and the next page's token ("" on the last). A token List did
	// not make is ErrBadPageToken.
	List(ctx context.Context, f GroupFilter) ([]orch.Group, string, error)

	// Mutate locks the group, loads it with the members of scope and the
	// facts of the tasks of the released members it loaded (a task that
	// is gone has no facts; a task whose status is the one the group last
	// recorded may have the group's own record of its times), and calls
	// decide. It stores what decide returns in one transaction: the
	// group's records (with the state after them), the new tasks, and the
	// cancellations, deletions and retries of member tasks, each by the
	// task aggregate's own rules (a task already final is not cancelled; a
	// task an attempt holds cannot be deleted, nor a task retried that is
	// not failed or cancelled: then task.ErrImmutable and nothing is
	// stored; a task to retry that is gone is task.ErrNotFound). A retry's
	// records carry the IP of the decision's last record. It returns the state
	// after, and the tasks it wrote. Unknown, deleted or another tenant's:
	// task.ErrNotFound and decide is not called. An error from decide is
	// returned and nothing is stored. A decision that cancels a task its
	// facts showed open but that has ended by the time it is written is
	// not stored: decide is called again with the facts as they are then.
	Mutate(ctx context.Context, tenant, id string, scope Scope,
		decide func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error)) (orch.State, []task.Task, error)

	// Due returns up to limit groups that may have something to do: a
	// running repeat whose wake time (orch.Group.NextWake) is at or before
	// now, or a group with an open released member whose task's status is
	// not the one the group last saw, or whose task is gone.
	Due(ctx context.Context, now time.Time, limit int) ([]string, error)
}

// NewGroup is a group to store: the records of orch.Create, the state
// after them, and its decision's new tasks.
type NewGroup struct {
	State    orch.State
	Decision orch.Decision
}

// GroupFilter selects groups to list; zero fields match everything.
type GroupFilter struct {
	Tenant       string
	Status, Mode string
	PageSize     int // default 50
	PageToken    string
	// Offset skips that many matching groups before the page (at most
	// sched.MaxListOffset); not with PageToken.
	Offset int
}

// TemplateStore keeps the template aggregate: its events and the template
// row. Template ids are per tenant.
type TemplateStore interface {
	// Get returns tenant's template id; a deleted or unknown one (or
	// another tenant's) is task.ErrNotFound.
	Get(ctx context.Context, tenant, id string) (orch.Template, error)
	// List returns a page of tenant's templates by id, optionally of one
	// category, and the next page's token.
	List(ctx context.Context, f TemplateFilter) ([]orch.Template, string, error)
	// Create stores a new template from its TemplateCreated record. An id
	// the tenant already uses (and has not deleted) is ErrExists.
	Create(ctx context.Context, tenant, id string, recs []orch.Record) (orch.Template, error)
	// Mutate runs decide on the template as locked for the write and
	// stores its records; unknown or deleted is task.ErrNotFound (decide
	// is not called); decide's errors are returned, nothing stored.
	Mutate(ctx context.Context, tenant, id string, decide func(t orch.Template) ([]orch.Record, error)) (orch.Template, error)
}

// TemplateFilter selects templates to list.
type TemplateFilter struct {
	Tenant, Category string
	PageSize         int // default 100
	PageToken        string
}

// ErrExists: a template with that id already exists (30006).
var ErrExists = errors.New("already exists")

// ErrBadPageToken is a list's answer to a page token it did not make.
var ErrBadPageToken = &task.InvalidError{Field: "page_token", Reason: "is not a token from a previous page"}
