package credentials

import (
	"net/netip"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
)

// KeyCacheTTL is how long a credential that authenticated — an API key, or
// an agent token used from the address it is bound to — is taken on trust
// without asking the database again. It bounds how late another gateway
// replica notices a key or token revoked, a token rotated or moved, or a
// tenant's tier changed; on the replica that made the change it takes
// effect at once.
const KeyCacheTTL = 5 * time.Second

// keyCacheMax bounds the cache; when full it starts afresh.
const keyCacheMax = 10_000

// keyCache remembers credentials that authenticated, so that a busy key or
// agent costs no database round trip on most requests. Entries are found
// by the SHA-256 of the secret (never the secret), with, for an agent
// token, the address it was used from (see userCacheKey, agentCacheKey).
//
// Forgetting wins over a concurrent authentication: a caller takes the
// generation before reading the database and puts with it, and a put
// whose generation a forget has since passed is dropped, so a read made
// before a change cannot put back what the change forgot.
type keyCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]cachedKey
}

type cachedKey struct {
	p     authn.Principal // without RemoteIP, which is per request
	until time.Time
}

// userCacheKey is the cache key of an API key: the hash of its secret.
func userCacheKey(hash []byte) string { return string(hash) }

// agentCacheKey is the cache key of an agent token used from ip: the hash
// of its secret and the address, so that a call from any other address
// misses and takes the full path, which enforces the address rules
// (checkAgentAddress). Hashes have a fixed length, so the key cannot be
// mistaken for another's.
func agentCacheKey(hash []byte, ip netip.Addr) string { return string(hash) + ip.String() }

// generation returns the value to pass to put for an authentication that
// starts now.
func (c *keyCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// get returns the principal cached under key if it is still fresh at now.
func (c *keyCache) get(key string, now time.Time) (authn.Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !now.Before(e.until) {
		return authn.Principal{}, false
	}
	return e.p, true
}

// put caches p under key until KeyCacheTTL after now, or until the
// credential expires if that is sooner, unless the cache forgot anything
// since gen was taken.
func (c *keyCache) put(gen uint64, key string, p authn.Principal, now time.Time, expiresAt *time.Time) {
	until := now.Add(KeyCacheTTL)
	if expiresAt != nil && expiresAt.Before(until) {
		until = *expiresAt
	}
	p.RemoteIP = ""
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = map[string]cachedKey{}
	}
	c.m[key] = cachedKey{p: p, until: until}
}

// forget drops the entries whose principal matches: a key or token was
// revoked, rotated or moved, or a tenant changed. Callers forget after
// the change committed, or failed: the cache may only shrink.
func (c *keyCache) forget(match func(authn.Principal) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.m {
		if match(e.p) {
			delete(c.m, k)
		}
	}
}

// forgetAPIKey drops the API key's entry.
func (c *keyCache) forgetAPIKey(keyID string) {
	c.forget(func(p authn.Principal) bool { return p.Kind == authn.KindUser && p.Subject == keyID })
}

// forgetAgent drops the entries of the agent's tokens, from every address.
func (c *keyCache) forgetAgent(agentID string) {
	c.forget(func(p authn.Principal) bool { return p.Kind == authn.KindAgent && p.AgentID == agentID })
}

// forgetTenant drops the entries of the tenant's API keys and agents,
// whose principals carry its tier.
func (c *keyCache) forgetTenant(tenantID string) {
	c.forget(func(p authn.Principal) bool { return p.TenantID == tenantID })
}
