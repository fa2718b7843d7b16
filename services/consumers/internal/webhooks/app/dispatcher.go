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

// Finished is an attempt and the state it leaves its delivery in.
type Finished struct {
	Attempt Attempt
	// State is pending (with Next, the next attempt's time), delivered or
	// dead.
	State     string
	Next      time.Time
	LastError string
}

// Timings of the recorder: attempts are recorded together, at most
// recordEvery after the first of them finished.
const (
	recordEvery = 5 * time.Millisecond
	recordBatch = 256
)

// RunDispatcher sends due deliveries until ctx is done. Step by step:
//
//  1. When woken (a new delivery, a redelivery, a slot freed), when the
//     next pending delivery falls due, or at the latest after Poll, claim
//     as many due deliveries as there are free slots (Concurrency in all,
//     PerTenant per tenant), skipping tenants whose slots are all taken,
//     tenants taking turns. A tenant without a signing key gets one, once.
//  2. Send each on its own goroutine: to the task's own URL or else the
//     tenant's default endpoint, signed with the tenant's key, under the
//     sender's timeout.
//  3. Record the attempt: a 2xx answer delivers it; an address that may
//     not be called, or no endpoint at all, makes it dead at once;
//     anything else schedules the next attempt on the backoff, or makes it
//     dead once that would be past its deadline. Attempts finished within
//     a few milliseconds of each other are recorded in one transaction.
//
// A slow or dead receiver holds only its tenant's slots, so other tenants'
// deliveries and the task pipeline (which never waits on a delivery) go
// on. A dispatcher that dies leaves its claims to the next one once their
// lease runs out; a delivery may then be sent twice, which webhook-id lets
// receivers tell.
func (a *App) RunDispatcher(ctx context.Context) {
	d := &dispatch{app: a, inflight: map[string]int{}, freed: make(chan struct{}, 1),
		finished: make(chan Finished, a.cfg.Concurrency)}
	recorded := make(chan struct{})
	go func() { defer close(recorded); d.record(ctx) }()
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
			close(d.finished)
			<-recorded
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
	finished chan Finished
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
	d.app.ensureKeys(ctx, due, now)
	for _, x := range due {
		d.mu.Lock()
		d.inflight[x.Delivery.TenantID]++
		d.total++
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if f, ok := d.app.deliver(ctx, x); ok {
				d.finished <- f
			}
			d.mu.Lock()
			if d.inflight[x.Delivery.TenantID]--; d.inflight[x.Delivery.TenantID] == 0 {
				delete(d.inflight, x.Delivery.TenantID)
			}
			d.total--
			d.mu.Unlock()
			d.wakeLoop()
		}()
	}
}

// wakeLoop wakes RunDispatcher's loop, which then claims again and looks
// for the next due delivery.
func (d *dispatch) wakeLoop() {
	select {
	case d.freed <- struct{}{}:
	default:
	}
}

// ensureKeys gives the tenants of due that have no signing key one, once
// per tenant; a tenant whose key cannot be made has its deliveries wait.
func (a *App) ensureKeys(ctx context.Context, due []Due, now time.Time) {
	keys := map[string][]byte{}
	failed := map[string]error{}
	for i := range due {
		x := &due[i]
		if x.Key != nil || x.KeyErr != nil {
			continue
		}
		t := x.Delivery.TenantID
		if _, done := keys[t]; !done && failed[t] == nil {
			fresh, err := a.newKey()
			if err == nil {
				fresh, err = a.cfg.Endpoints.EnsureKey(ctx, t, fresh, now)
			}
			if err != nil {
				failed[t] = err
			} else {
				keys[t] = fresh
			}
		}
		x.Key, x.KeyErr = keys[t], failed[t]
	}
}

// record is step 3's writing: it gathers finished attempts and records
// them together, until finished is closed.
func (d *dispatch) record(ctx context.Context) {
	store := context.WithoutCancel(ctx)
	for f := range d.finished {
		batch := []Finished{f}
		timer := time.NewTimer(recordEvery)
	gather:
		for len(batch) < recordBatch {
			select {
			case f, ok := <-d.finished:
				if !ok {
					break gather
				}
				batch = append(batch, f)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		if err := d.app.cfg.Schedule.Finish(store, batch); err != nil {
			d.app.cfg.Logger.Warn("recording webhook attempts failed; they are tried again once their lease runs out",
				"attempts", len(batch), "err", err)
		}
		// A retry scheduled just now may fall due before the loop's sleep
		// ends: wake it to look again.
		d.wakeLoop()
	}
}

// errNoEndpoint is the last error of a delivery with nowhere to go.
var errNoEndpoint = errors.New("no endpoint: the task has no webhook.url and the tenant no default endpoint")

// deliver is step 2 for one delivery, and what step 3 records; ok is
// false when there is nothing to record (the dispatcher is stopping: the
// next one sends it once its lease runs out).
func (a *App) deliver(ctx context.Context, due Due) (Finished, bool) {
	cfg := a.cfg
	d := due.Delivery
	at := cfg.Now().UTC()
	attempt := Attempt{DeliveryID: d.ID, Number: due.Attempts + 1, At: at, URL: d.URL}
	if attempt.URL == "" {
		attempt.URL = due.Endpoint
	}
	switch {
	case attempt.URL == "":
		attempt.Error = errNoEndpoint.Error()
		return Finished{Attempt: attempt, State: domain.StateDead, LastError: attempt.Error}, true
	case due.KeyErr != nil:
		attempt.Error = "cannot sign: " + due.KeyErr.Error() + "; rotate the tenant's secret or restore the service key"
		return a.retryLater(due, attempt), true
	}
	ts := at.Unix()
	headers := map[string]string{
		domain.HeaderID: d.ID, domain.HeaderTimestamp: strconv.FormatInt(ts, 10),
		domain.HeaderSignature: domain.Sign(due.Key, d.ID, ts, []byte(d.Body)),
	}
	res := cfg.Sender.Send(ctx, attempt.URL, headers, []byte(d.Body))
	if ctx.Err() != nil {
		return Finished{}, false
	}
	attempt.HTTPStatus, attempt.ResponseBody, attempt.Duration = res.HTTPStatus, res.Body, res.Duration
	if res.Err != nil {
		attempt.Error = res.Err.Error()
	}
	switch {
	case res.Err == nil && domain.Delivered(res.HTTPStatus):
		return Finished{Attempt: attempt, State: domain.StateDelivered}, true
	case res.Refused:
		return Finished{Attempt: attempt, State: domain.StateDead, LastError: attempt.Error}, true
	}
	if attempt.Error == "" {
		attempt.Error = "the receiver answered HTTP " + strconv.Itoa(res.HTTPStatus)
	}
	return a.retryLater(due, attempt), true
}

// retryLater schedules the next attempt on the backoff, or makes the
// delivery dead once that would be past its deadline.
func (a *App) retryLater(due Due, attempt Attempt) Finished {
	next, ok := a.cfg.Backoff.Next(a.cfg.Now().UTC(), attempt.Number, due.Deadline, a.cfg.Rand())
	if !ok {
		return Finished{Attempt: attempt, State: domain.StateDead, LastError: attempt.Error + " (retries exhausted)"}
	}
	return Finished{Attempt: attempt, State: domain.StatePending, Next: next, LastError: attempt.Error}
}
