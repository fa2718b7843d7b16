// Package app holds webhook notification's use cases: a tenant's default
// endpoint and signing secret (endpoints.go), the deliveries' listing and
// redelivery (deliveries.go), and the dispatcher that sends them
// (dispatcher.go). It depends only on the interfaces declared here; the
// consumers service wires the Postgres store, the sealed secrets and the
// address-checking HTTP sender in. The deliveries themselves are made by
// the webhook consumer from task events (adapters/postgres).
package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// ErrNotFound: no such delivery for this caller (another tenant's
// included).
var ErrNotFound = errors.New("no such webhook delivery")

// ErrForbidden: the caller may not do this (an operator key managing a
// tenant's endpoint, an agent).
var ErrForbidden = errors.New("forbidden")

// Caller is who asks: a tenant's key, or an operator.
type Caller struct {
	Tenant   string
	Operator bool
}

// Endpoint is a tenant's default endpoint, as shown (never its secret).
type Endpoint struct {
	TenantID, URL              string
	HasSecret                  bool
	SecretCreatedAt, UpdatedAt time.Time
}

// Endpoints keeps tenants' default endpoints and signing keys.
type Endpoints interface {
	// Get returns tenant's endpoint; one that was never set is
	// Endpoint{TenantID: tenant}.
	Get(ctx context.Context, tenant string) (Endpoint, error)
	// SetURL stores url as tenant's endpoint at now and, when the tenant
	// has no key yet, key as its key (created reports that).
	SetURL(ctx context.Context, tenant, url string, key []byte, now time.Time) (e Endpoint, created bool, err error)
	// SetKey replaces tenant's key.
	SetKey(ctx context.Context, tenant string, key []byte, now time.Time) (Endpoint, error)
	// EnsureKey returns tenant's key, storing key as it when there is none.
	EnsureKey(ctx context.Context, tenant string, key []byte, now time.Time) ([]byte, error)
}

// DeliveryView is a delivery with its state.
type DeliveryView struct {
	domain.Delivery
	State                      string
	Attempts                   int
	NextAttemptAt, DeliveredAt time.Time
	LastError                  string
}

// Attempt is one try of a delivery.
type Attempt struct {
	DeliveryID   string
	Number       int
	At           time.Time
	URL          string
	HTTPStatus   int
	Error        string
	Duration     time.Duration
	ResponseBody string
}

// DeliveryFilter selects deliveries: Tenant ("" = every tenant), State
// ("" = every state but skipped), TaskID, newest first after After.
type DeliveryFilter struct {
	Tenant, State, TaskID string
	PageSize              int
	After                 *Cursor
}

// Deliveries reads and redelivers deliveries.
type Deliveries interface {
	// List returns up to f.PageSize+1 deliveries, newest first (created
	// time, then id, descending).
	List(ctx context.Context, f DeliveryFilter) ([]DeliveryView, error)
	// Get returns a delivery of tenant ("" = any) with its attempts,
	// oldest first, or ErrNotFound.
	Get(ctx context.Context, tenant, id string) (DeliveryView, []Attempt, error)
	// Redeliver makes a delivery of tenant ("" = any) due at now with a
	// new deadline, whatever its state, or returns ErrNotFound.
	Redeliver(ctx context.Context, tenant, id string, now, deadline time.Time) (DeliveryView, error)
}

// Due is a delivery the dispatcher is to send.
type Due struct {
	Delivery domain.Delivery
	// Attempts made before this one.
	Attempts int
	Deadline time.Time
	// Endpoint is the tenant's default endpoint ("" = none); Key its
	// signing key (nil = none yet).
	Endpoint string
	Key      []byte
	// KeyErr says why the tenant's stored key could not be read (sealed
	// under another service key); that delivery is retried, the others go
	// on.
	KeyErr error
}

// Schedule is the dispatcher's store.
type Schedule interface {
	// Claim marks up to n due deliveries (pending and due at now, or being
	// sent by a dispatcher whose lease ran out) as being sent until
	// leaseUntil and returns them: at most perTenant of one tenant, none of
	// the tenants in skip, the tenants taking turns (each tenant's first
	// due delivery before any tenant's second).
	Claim(ctx context.Context, now time.Time, n, perTenant int, skip []string, leaseUntil time.Time) ([]Due, error)
	// Finish records attempts and moves each one's delivery to its state,
	// all in one transaction.
	Finish(ctx context.Context, done []Finished) error
	// NextDue returns when the earliest pending delivery is due; ok is
	// false when none is pending.
	NextDue(ctx context.Context) (at time.Time, ok bool, err error)
}

// SendResult is what a receiver did with a delivery.
type SendResult struct {
	HTTPStatus int
	// Body is the start of the receiver's answer.
	Body string
	Err  error
	// Refused: the URL's address may not be called (not public, not
	// allow-listed); trying again changes nothing.
	Refused  bool
	Duration time.Duration
}

// Sender posts a delivery.
type Sender interface {
	Send(ctx context.Context, url string, headers map[string]string, body []byte) SendResult
}

// Config configures App.
type Config struct {
	Endpoints  Endpoints
	Deliveries Deliveries
	Schedule   Schedule
	Sender     Sender
	Backoff    domain.Backoff
	// PerTenant bounds one tenant's deliveries in flight (default 8), so a
	// slow receiver holds up its own tenant only; Concurrency bounds all
	// of them (default 256).
	PerTenant, Concurrency int
	// Lease is how long a claimed delivery is this dispatcher's (default
	// 1m: longer than a send's timeout).
	Lease time.Duration
	// Poll bounds how long the dispatcher sleeps when nobody wakes it and
	// no delivery falls due sooner (default 1s).
	Poll time.Duration
	Now  func() time.Time
	// Rand returns a number in [0, 1) for the backoff's jitter.
	Rand func() float64
	// Keys is where new signing keys come from (crypto/rand.Reader).
	Keys   io.Reader
	Logger *slog.Logger
}

// App is the use cases.
type App struct {
	cfg  Config
	wake chan struct{}
}

// New returns the use cases over cfg.
func New(cfg Config) *App {
	if cfg.Backoff == (domain.Backoff{}) {
		cfg.Backoff = domain.DefaultBackoff
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = 8
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &App{cfg: cfg, wake: make(chan struct{}, 1)}
}

// MaxAge is how long deliveries are retried.
func (a *App) MaxAge() time.Duration { return a.cfg.Backoff.MaxAge }
