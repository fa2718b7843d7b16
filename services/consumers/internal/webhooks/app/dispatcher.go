package app

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// Wake tells the dispatcher that deliveries may be due (a consumer made
// one, an operator asked for a redelivery). It never blocks.
func (a *App) Wake() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// RunDispatcher sends due deliveries until ctx is done. Step by step:
//
//  1. When woken (a new delivery, a redelivery, a slot freed), when the
//     next pending delivery falls due, or at the latest after Poll, claim
//     as many due deliveries as there are free slots (Concurrency in all,
//     PerTenant per tenant), skipping tenants whose slots are all taken,
//     tenants taking turns.
//  2. Send each on its own goroutine: to the task's own URL or else the
//     tenant's default endpoint, signed with the tenant's key (one is made
//     if the tenant has none yet), under the sender's timeout.
//  3. Record the attempt: a 2xx answer delivers it; an address that may
//     not be called, or no endpoint at all, makes it dead at once;
//     anything else schedules the next attempt on the backoff, or makes it
//     dead once that would be past its deadline.
//
// A slow or dead receiver holds only its tenant's slots, so other tenants'
// deliveries and the task pipeline (which never waits on a delivery) go
// on. A dispatcher that dies leaves its claims to the next one once their
// lease runs out; a delivery may then be sent twice, which webhook-id lets
// receivers tell.
func (a *App) RunDispatcher(ctx context.Context) {
	d := &dispatch{app: a, inflight: map[string]int{}, freed: make(chan struct{}, 1)}
	for {
		d.claim(ctx)
		// A delivery due already was left for lack of a slot: a freed slot
		// wakes the loop, so only one due later shortens the sleep.
		wait := a.cfg.Poll
		if at, ok, err := a.cfg.Schedule.NextDue(ctx); err == nil && ok {
			if until := at.Sub(a.cfg.Now()); until > 0 {
				wait = min(wait, until)
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			d.wg.Wait()
			return
		case <-a.wake:
		case <-timer.C:
		case <-d.freed:
		}
		timer.Stop()
	}
}

type dispatch struct {
	app      *App
	mu       sync.Mutex
	inflight map[string]int // by tenant
	total    int
	wg       sync.WaitGroup
	freed    chan struct{}
}

// claim is step 1.
func (d *dispatch) claim(ctx context.Context) {
	cfg := d.app.cfg
	d.mu.Lock()
	free := cfg.Concurrency - d.total
	var skip []string
	for t, n := range d.inflight {
		if n >= cfg.PerTenant {
			skip = append(skip, t)
		}
	}
	d.mu.Unlock()
	if free <= 0 || ctx.Err() != nil {
		return
	}
	now := cfg.Now().UTC()
	due, err := cfg.Schedule.Claim(ctx, now, free, cfg.PerTenant, skip, now.Add(cfg.Lease))
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn("claiming due webhook deliveries failed", "err", err)
		}
		return
	}
	for _, x := range due {
		d.mu.Lock()
		d.inflight[x.Delivery.TenantID]++
		d.total++
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.app.deliver(ctx, x)
			d.mu.Lock()
			if d.inflight[x.Delivery.TenantID]--; d.inflight[x.Delivery.TenantID] == 0 {
				delete(d.inflight, x.Delivery.TenantID)
			}
			d.total--
			d.mu.Unlock()
			select {
			case d.freed <- struct{}{}:
			default:
			}
		}()
	}
}

// errNoEndpoint is the last error of a delivery with nowhere to go.
var errNoEndpoint = errors.New("no endpoint: the task has no webhook.url and the tenant no default endpoint")

// deliver is steps 2 and 3 for one delivery.
func (a *App) deliver(ctx context.Context, due Due) {
	cfg := a.cfg
	d := due.Delivery
	at := cfg.Now().UTC()
	attempt := Attempt{DeliveryID: d.ID, Number: due.Attempts + 1, At: at, URL: d.URL}
	if attempt.URL == "" {
		attempt.URL = due.Endpoint
	}
	finish := func(state string, next time.Time, lastError string) {
		if err := cfg.Schedule.Finish(context.WithoutCancel(ctx), attempt, state, next, lastError); err != nil {
			cfg.Logger.Warn("recording a webhook attempt failed; it is tried again once its lease runs out",
				"delivery", d.ID, "err", err)
		}
	}
	if attempt.URL == "" {
		attempt.Error = errNoEndpoint.Error()
		finish(domain.StateDead, time.Time{}, attempt.Error)
		return
	}
	key := due.Key
	if key == nil {
		fresh, err := a.newKey()
		if err == nil {
			key, err = cfg.Endpoints.EnsureKey(ctx, d.TenantID, fresh, at)
		}
		if err != nil {
			cfg.Logger.Warn("no signing key for a webhook delivery; it is tried again once its lease runs out", "delivery", d.ID, "err", err)
			return
		}
	}
	ts := at.Unix()
	headers := map[string]string{
		domain.HeaderID: d.ID, domain.HeaderTimestamp: strconv.FormatInt(ts, 10),
		domain.HeaderSignature: domain.Sign(key, d.ID, ts, []byte(d.Body)),
	}
	res := cfg.Sender.Send(ctx, attempt.URL, headers, []byte(d.Body))
	if ctx.Err() != nil {
		return // stopping: the lease runs out and the next dispatcher sends it
	}
	attempt.HTTPStatus, attempt.ResponseBody, attempt.Duration = res.HTTPStatus, res.Body, res.Duration
	if res.Err != nil {
		attempt.Error = res.Err.Error()
	}
	switch {
	case res.Err == nil && domain.Delivered(res.HTTPStatus):
		finish(domain.StateDelivered, time.Time{}, "")
		return
	case res.Refused:
		finish(domain.StateDead, time.Time{}, attempt.Error)
		return
	}
	if attempt.Error == "" {
		attempt.Error = "the receiver answered HTTP " + strconv.Itoa(res.HTTPStatus)
	}
	now := cfg.Now().UTC()
	next, ok := cfg.Backoff.Next(now, attempt.Number, due.Deadline, cfg.Rand())
	if !ok {
		finish(domain.StateDead, time.Time{}, attempt.Error+" (retries exhausted)")
		return
	}
	finish(domain.StatePending, next, attempt.Error)
}
