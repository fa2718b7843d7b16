// Package app holds the quota service's use cases (tenants, clusters and
// inventory, quota production, update and unsubscription, reads, the
// submit-time GU quota check) and the process manager that drives
// production and unsubscription through the cluster operator.
package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// ErrForbidden: the caller may not do this (a tenant's key on an operator
// action).
var ErrForbidden = errors.New("forbidden: operator credential required")

// Caller is who asks: an operator (Admin) or a tenant's key. Actor is
// what an operator's changes are recorded as.
type Caller struct {
	TenantID string
	Admin    bool
	Actor    Actor
}

// Operator is the cluster operator (the MFS custom resources and their
// operator; docs/decisions/0013-quota-flows-as-process-managers.md): it
// creates Ray clusters and WorkGroups on a compute cluster and reports
// their status. Every method is idempotent.
type Operator interface {
	// ApplyRayCluster creates the Ray cluster's resource, or leaves it as
	// is when it exists. An error wrapping capacity.ErrOperatorRejected can
	// never succeed as is (the resource is refused); others are retried.
	ApplyRayCluster(ctx context.Context, spec capacity.RaySpec) error
	// RayClusterStatus reports the Ray cluster's phase.
	RayClusterStatus(ctx context.Context, spec capacity.RaySpec) (capacity.Observation, error)
	// ApplyWorkGroup creates or updates the WorkGroup's resource to spec.
	// Errors as for ApplyRayCluster.
	ApplyWorkGroup(ctx context.Context, spec capacity.WorkGroupSpec) error
	// WorkGroupStatus reports the WorkGroup's phase and the generation of
	// the spec it is about; PhaseAbsent when it does not exist.
	WorkGroupStatus(ctx context.Context, spec capacity.WorkGroupSpec) (capacity.Observation, error)
	// DeleteWorkGroup deletes the WorkGroup's resource; one that does not
	// exist is deleted already (nil).
	DeleteWorkGroup(ctx context.Context, spec capacity.WorkGroupSpec) error
}

// App is the quota service's use cases over its store.
type App struct {
	store Store
	now   func() time.Time
	newID func() string
	log   *slog.Logger

	mu       sync.Mutex
	watchers map[chan struct{}]struct{}
	// follow makes admission follow the WorkGroups now (FollowWorkGroups).
	follow func(context.Context) error
}

// New returns the use cases. now and newID may be nil (real clock, random
// ids).
func New(store Store, now func() time.Time, newID func() string, log *slog.Logger) *App {
	if now == nil {
		now = time.Now
	}
	if newID == nil {
		newID = RandomID
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &App{store: store, now: now, newID: newID, log: log, watchers: map[chan struct{}]struct{}{}}
}

// RandomID returns a new quota id: "q-" and 16 hex digits, a DNS label so
// it can name custom resources.
func RandomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "q-" + hex.EncodeToString(b[:])
}

func (a *App) clock() time.Time { return a.now().UTC().Truncate(time.Microsecond) }

// Committed tells the app what a transaction recorded: WorkGroup changes
// wake WatchWorkGroups subscribers. The store's AfterCommit calls it.
func (a *App) Committed(events []capacity.Event) {
	if changesWorkGroups(events) {
		a.notify()
	}
}

// changesWorkGroups reports whether events start or stop a WorkGroup
// running.
func changesWorkGroups(events []capacity.Event) bool {
	for _, e := range events {
		switch e.Data.(type) {
		case capacity.WorkGroupRunning, capacity.WorkGroupFailed, capacity.WorkGroupDeleting, capacity.WorkGroupDeleted,
			capacity.WorkGroupSpecChanged:
			return true
		}
	}
	return false
}

// FollowWorkGroups sets what makes the admission layer's WorkGroup queues
// follow the WorkGroups now (the quota process's SyncAdmission; nil
// unsets it). A command that stops WorkGroups running — DeleteQuota, an
// UpdateQuota or CreateQuota that applies one again — calls it before it
// answers, so once it has answered the queues of those WorkGroups admit
// nothing new (docs/api/quota.md#workgroup-queues). A failure is logged:
// the sync its commit woke (WatchWorkGroups) retries.
func (a *App) FollowWorkGroups(follow func(context.Context) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.follow = follow
}

// followWorkGroups has admission follow the WorkGroups when events changed
// one.
func (a *App) followWorkGroups(ctx context.Context, events []capacity.Event) {
	a.mu.Lock()
	follow := a.follow
	a.mu.Unlock()
	if follow == nil || !changesWorkGroups(events) {
		return
	}
	if err := follow(ctx); err != nil {
		a.log.Warn("the WorkGroup queues did not follow a change at once; the sync retries", "err", err)
	}
}

func (a *App) notify() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch := range a.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// WatchWorkGroups returns a channel that receives a value (coalesced) after
// the set of Running WorkGroups may have changed in this process, until
// ctx is done.
func (a *App) WatchWorkGroups(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	a.watchers[ch] = struct{}{}
	a.mu.Unlock()
	go func() {
		<-ctx.Done()
		a.mu.Lock()
		delete(a.watchers, ch)
		a.mu.Unlock()
	}()
	return ch
}

func requireAdmin(c Caller) error {
	if !c.Admin {
		return ErrForbidden
	}
	return nil
}

// visible reports whether the caller may see the tenant's records; others'
// are not found rather than forbidden, so ids do not leak.
func visible(c Caller, tenantID string) bool { return c.Admin || c.TenantID == tenantID }
