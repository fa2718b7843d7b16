// Package throttle enforces the gateway's per-key and per-tenant limits of
// requests per minute (RPM) and tokens per minute (TPM) on the REST API and
// the gRPC front door.
//
// A request by an API key is charged against four limits at once, all or
// nothing (package ratelimit): the key's RPM and TPM, when the key has its
// own, and its tenant's RPM and TPM, which are the tenant's own or else its
// tier's defaults. A limit of 0 is no limit. Every request costs one
// request; its token cost is computed by Cost (the video API) or is the
// configured flat cost of other routes (0 by default: RPM only).
//
// Agents and operators are not limited: agents are the platform's own
// workers, whose pace the lease protocol already sets, and operators must
// be able to act while their tenants are throttled.
//
// Limits are looked up per key and kept for CacheTTL, so a change through
// the admin API takes effect within that time on every replica. Revoking a
// key takes effect at once: that is authentication, not this package.
//
// When the limiter's store fails (Redis down), requests are let through and
// the failure is logged: the limits protect the platform from bursts, and
// refusing everything while Redis restarts would do more harm than a
// minute without limits.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/ratelimit"
)

// Defaults of Config.
const (
	DefaultCacheTTL = 10 * time.Second
	// DefaultVideoTokensPerSecond is the token cost of one second of
	// generated video.
	DefaultVideoTokensPerSecond = 100
)

// DefaultTiers are the tier defaults when the configuration gives none. A
// video generation with a full prompt costs 1,300 tokens at the default
// cost per second: some 75 a minute for a standard tenant.
var DefaultTiers = map[string]credentials.Limits{
	credentials.TierPremium:  {RPM: 3000, TPM: 1_000_000},
	credentials.TierStandard: {RPM: 600, TPM: 100_000},
}

// Config configures a Throttle.
type Config struct {
	// Tiers are the default limits of a tenant without its own, by tier.
	// A tier not listed has no default limits.
	Tiers map[string]credentials.Limits
	// VideoTokensPerSecond is the token cost of each second of a video
	// generation request (see Cost).
	VideoTokensPerSecond int64
	// OtherRouteTokens is the token cost of every other request.
	OtherRouteTokens int64
	// CacheTTL is how long a key's limits are reused before being read
	// again (DefaultCacheTTL if 0).
	CacheTTL time.Duration
}

// LimitSource reads a key's and its tenant's stored limits
// (credentials.Store).
type LimitSource interface {
	LimitsOfKey(ctx context.Context, keyID string) (credentials.KeyLimits, error)
}

// Throttle decides whether a request may proceed. It is safe for
// concurrent use.
type Throttle struct {
	limiter ratelimit.Limiter
	src     LimitSource
	cfg     Config
	now     func() time.Time
	log     *slog.Logger

	mu    sync.Mutex
	cache map[string]cachedLimits

	rejected rejections
}

type cachedLimits struct {
	limits  credentials.KeyLimits
	fetched time.Time
}

// New returns a Throttle charging limiter with the limits of src. now is
// the clock of the limit cache (time.Now if nil); log receives store
// failures (slog.Default if nil).
func New(limiter ratelimit.Limiter, src LimitSource, cfg Config, now func() time.Time, log *slog.Logger) *Throttle {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.Tiers == nil {
		cfg.Tiers = DefaultTiers
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Throttle{limiter: limiter, src: src, cfg: cfg, now: now, log: log, cache: map[string]cachedLimits{},
		rejected: newRejections()}
}

// Usage is where the request's limits stand, for X-RateLimit-* headers:
// of the limits that apply, the one with the least remaining.
type Usage struct {
	// Requests and Tokens are nil when no such limit applies.
	Requests, Tokens *Window
}

// Window is one limit's state.
type Window struct {
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
}

// Refusal is the error of Check when a limit is exceeded.
type Refusal struct {
	// RetryAfter is how long until the request would fit; 0 when it never
	// can (Never).
	RetryAfter time.Duration
	// Never says the request costs more tokens than a limit allows in a
	// whole minute: retrying cannot help.
	Never  bool
	Reason string
	Usage  Usage
}

func (r *Refusal) Error() string { return r.Reason }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, as the
// Retry-After header wants it.
func (r *Refusal) RetryAfterSeconds() int64 {
	return int64(math.Ceil(r.RetryAfter.Seconds()))
}

// ErrStore is returned (wrapped) when the limits could not be read; the
// request's fate is then unknown and the caller answers 503.
var ErrStore = errors.New("throttle: limits unavailable")

// limitKind is one of the four limits of a request.
type limitKind struct {
	name   string // for messages
	scope  string // "key" or "tenant"
	tokens bool
	label  string // the rejections metric's limit label
}

// Check charges one request costing tokens to the principal's limits.
// It returns the usage when allowed; a *Refusal when a limit is exceeded
// (nothing is charged then); ErrStore when the limits could not be read.
func (t *Throttle) Check(ctx context.Context, p authn.Principal, tokens int64) (Usage, error) {
	if p.Kind != authn.KindUser {
		return Usage{}, nil
	}
	lim, err := t.limitsOf(ctx, p.Subject)
	if err != nil {
		return Usage{}, err
	}
	tenant := lim.Tenant
	def := t.cfg.Tiers[p.Tier]
	if tenant.RPM == 0 {
		tenant.RPM = def.RPM
	}
	if tenant.TPM == 0 {
		tenant.TPM = def.TPM
	}
	// One hash tag per tenant: every key of a call lands in one Redis
	// Cluster slot.
	base := "rl:{" + p.TenantID + "}:"
	// At most four limits apply; sized for them, the slices never grow.
	charges, kinds := make([]ratelimit.Charge, 0, 4), make([]limitKind, 0, 4)
	add := func(limit int, key string, cost int64, k limitKind) {
		if limit <= 0 {
			return
		}
		charges = append(charges, ratelimit.Charge{Key: key, Limit: ratelimit.PerMinute(int64(limit)), Cost: cost})
		kinds = append(kinds, k)
	}
	add(lim.Key.RPM, base+"key:"+p.Subject+":rpm", 1, limitKind{"requests per minute", "API key", false, "key_rpm"})
	add(lim.Key.TPM, base+"key:"+p.Subject+":tpm", tokens, limitKind{"tokens per minute", "API key", true, "key_tpm"})
	add(tenant.RPM, base+"rpm", 1, limitKind{"requests per minute", "tenant", false, "tenant_rpm"})
	add(tenant.TPM, base+"tpm", tokens, limitKind{"tokens per minute", "tenant", true, "tenant_tpm"})
	if len(charges) == 0 {
		return Usage{}, nil
	}
	for i, c := range charges {
		if c.Cost > c.Limit.Burst {
			t.rejected.add(ctx, p.TenantID, "too_large")
			usage := t.standing(ctx, charges, kinds)
			return usage, &Refusal{
				Never:  true,
				Reason: fmt.Sprintf("request costs %d tokens, more than the %s limit of %d %s", c.Cost, kinds[i].scope, c.Limit.Burst, kinds[i].name),
				Usage:  usage,
			}
		}
	}
	d, err := t.limiter.Allow(ctx, charges...)
	if err != nil {
		outages.Log(ctx, t.log, slog.LevelWarn, "rate limiter unavailable; request let through", "tenant_id", p.TenantID, "key_id", p.Subject, "err", err)
		return Usage{}, nil
	}
	usage := usageOf(charges, kinds, d)
	if d.Allowed {
		return usage, nil
	}
	// Name the limit that needs the longest wait: waiting for it is
	// waiting for all.
	worst := 0
	for i, s := range d.States {
		if s.RetryAfter > d.States[worst].RetryAfter {
			worst = i
		}
	}
	t.rejected.add(ctx, p.TenantID, kinds[worst].label)
	return usage, &Refusal{
		RetryAfter: d.RetryAfter,
		Reason:     fmt.Sprintf("%s limit of %d %s exceeded", kinds[worst].scope, charges[worst].Limit.Rate, kinds[worst].name),
		Usage:      usage,
	}
}

// standing is where the limits of charges stand, charging nothing (every
// cost 0): a request refused before it could be charged still tells the
// client its limits, as every other answer does. When the store cannot
// say, there is nothing to tell.
func (t *Throttle) standing(ctx context.Context, charges []ratelimit.Charge, kinds []limitKind) Usage {
	free := make([]ratelimit.Charge, len(charges))
	for i, c := range charges {
		c.Cost = 0
		free[i] = c
	}
	d, err := t.limiter.Allow(ctx, free...)
	if err != nil {
		return Usage{}
	}
	return usageOf(charges, kinds, d)
}

// usageOf keeps, for requests and for tokens, the limit with the least
// remaining.
func usageOf(charges []ratelimit.Charge, kinds []limitKind, d ratelimit.Decision) Usage {
	var u Usage
	windows := make([]Window, len(d.States)) // one allocation for all
	for i, s := range d.States {
		w := &windows[i]
		*w = Window{Limit: charges[i].Limit.Rate, Remaining: s.Remaining, ResetAfter: s.ResetAfter}
		cur := &u.Requests
		if kinds[i].tokens {
			cur = &u.Tokens
		}
		if *cur == nil || w.Remaining < (*cur).Remaining {
			*cur = w
		}
	}
	return u
}

// Forget drops every cached limit, so that a change made through this
// gateway applies from its next request (other replicas see it within
// CacheTTL).
func (t *Throttle) Forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.cache)
}

// limitsOf returns the key's limits, from the cache when fresh.
func (t *Throttle) limitsOf(ctx context.Context, keyID string) (credentials.KeyLimits, error) {
	now := t.now()
	t.mu.Lock()
	c, ok := t.cache[keyID]
	t.mu.Unlock()
	if ok && now.Sub(c.fetched) < t.cfg.CacheTTL {
		return c.limits, nil
	}
	l, err := t.src.LimitsOfKey(ctx, keyID)
	if err != nil {
		return credentials.KeyLimits{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Entries of keys no longer used would stay forever; the number of
	// keys is small, but sweep stale entries when adding a new one so the
	// map tracks the keys in use.
	if !ok {
		for k, v := range t.cache {
			if now.Sub(v.fetched) >= t.cfg.CacheTTL {
				delete(t.cache, k)
			}
		}
	}
	t.cache[keyID] = cachedLimits{limits: l, fetched: now}
	return l, nil
}
