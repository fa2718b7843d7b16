package app

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// NotifyChannel is the Postgres channel scheduler replicas use to wake each
// other's waiting claims when work appears.
const NotifyChannel = "taskmesh_tasks"

// Hub wakes what waits on tasks: claims long-polling for work, and
// watchers of one task. Within a process it is a broadcast; across
// replicas, Listen and the debounced NOTIFY carry "work appeared".
type Hub struct {
	mu       sync.Mutex
	work     chan struct{} // closed and replaced when work may have appeared
	watchers map[string]map[chan struct{}]struct{}
	notify   chan struct{}
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

// WakeClaimers wakes local waiting claims and asks for a NOTIFY to the
// other replicas.
func (h *Hub) WakeClaimers() {
	h.wakeLocal()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

func (h *Hub) wakeLocal() {
	h.mu.Lock()
	close(h.work)
	h.work = make(chan struct{})
	h.mu.Unlock()
}

// Changed tells watchers of t that it changed, and wakes claims when t
// became claimable.
func (h *Hub) Changed(t domain.Task) {
	h.mu.Lock()
	for ch := range h.watchers[t.ID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
	if t.Status == domain.StatusPending {
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

// Run sends the debounced NOTIFYs and LISTENs for other replicas' until ctx
// is done. Losing it only costs latency: waiting claims poll every second.
func (h *Hub) Run(ctx context.Context, pool *pgxpool.Pool) {
	go h.listen(ctx, pool)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.notify:
			_, _ = pool.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel)
			// At most one NOTIFY per 5 ms: bursts of submissions need one.
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

func (h *Hub) listen(ctx context.Context, pool *pgxpool.Pool) {
	for ctx.Err() == nil {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
			conn.Release()
			sleep(ctx, time.Second)
			continue
		}
		for {
			if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
				break
			}
			h.wakeLocal()
		}
		// The session may be in any state after an error: never reuse it.
		conn.Hijack().Close(context.WithoutCancel(ctx))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
