package app

import (
	"context"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Hub wakes what waits on tasks: claims long-polling for work, and
// watchers of one task. Within a process it is a broadcast; across
// replicas, an adapter carries "work appeared" both ways: it forwards
// OtherReplicas' signals to the other replicas and calls WakeLocal when
// one of them signals (package adapters/postgres: LISTEN/NOTIFY).
type Hub struct {
	mu       sync.Mutex
	work     chan struct{} // closed and replaced when work may have appeared
	watchers map[string]map[chan struct{}]struct{}
	notify   chan struct{}
	// observers see every task after each committed change.
	observers []func(domain.Task)
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{work: make(chan struct{}), watchers: map[string]map[chan struct{}]struct{}{}, notify: make(chan struct{}, 1)}
}

// WorkSignal returns a channel closed at the next WakeClaimers.
func (h *Hub) WorkSignal() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.work
}

// WakeClaimers wakes local waiting claims and asks for a signal to the
// other replicas.
func (h *Hub) WakeClaimers() {
	h.WakeLocal()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// OtherReplicas receives a value when the other replicas should wake their
// claims. Signals that arrive while one is pending are merged into it.
func (h *Hub) OtherReplicas() <-chan struct{} { return h.notify }

// WakeLocal wakes this process's waiting claims (another replica's work
// appeared).
func (h *Hub) WakeLocal() {
	h.mu.Lock()
	close(h.work)
	h.work = make(chan struct{})
	h.mu.Unlock()
}

// Observe calls fn with every task after each change committed through
// this process's use cases (an in-process component with rules of its own
// about tasks, such as the pipeline's process manager). fn runs in the
// committing goroutine: it must not block. Call it before serving.
func (h *Hub) Observe(fn func(domain.Task)) {
	h.mu.Lock()
	h.observers = append(h.observers, fn)
	h.mu.Unlock()
}

// Changed tells watchers and observers of t that it changed, and wakes
// claims when t became claimable, or completed as a member of a group:
// tasks waiting for it (depends_on) may have become claimable.
func (h *Hub) Changed(t domain.Task) {
	h.mu.Lock()
	for ch := range h.watchers[t.ID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	observers := h.observers
	h.mu.Unlock()
	for _, f := range observers {
		f(t)
	}
	if t.Status == domain.StatusPending || (t.Status == domain.StatusCompleted && t.Spec.GroupID != "") {
		h.WakeClaimers()
	}
}

// Watch subscribes to changes of one task until cancel is called.
func (h *Hub) Watch(id string) (changes <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.watchers[id] == nil {
		h.watchers[id] = map[chan struct{}]struct{}{}
	}
	h.watchers[id][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.watchers[id], ch)
		if len(h.watchers[id]) == 0 {
			delete(h.watchers, id)
		}
		h.mu.Unlock()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
