package credentials

import (
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/platform/authn"
)

// KeyCacheTTL is how long an API key that authenticated is taken on trust
// without asking the database again. It bounds how late another gateway
// replica notices a key revoked or a tenant's tier changed; on the replica
// that made the change it takes effect at once.
const KeyCacheTTL = 5 * time.Second

// keyCacheMax bounds the cache; when full it starts afresh.
const keyCacheMax = 10_000

// keyCache remembers API keys that authenticated, by the SHA-256 of their
// secret (never the secret), so that a busy key costs no database round
// trip on most requests.
type keyCache struct {
	mu sync.Mutex
	m  map[string]cachedKey
}

type cachedKey struct {
	p     authn.Principal // without RemoteIP, which is per request
	until time.Time
}

// get returns the principal of the key with this hash if it is cached and
// still fresh at now.
func (c *keyCache) get(hash []byte, now time.Time) (authn.Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(hash)]
	if !ok || !now.Before(e.until) {
		return authn.Principal{}, false
	}
	return e.p, true
}

// put caches p for the key with this hash until KeyCacheTTL after now, or
// until the key expires if that is sooner.
func (c *keyCache) put(hash []byte, p authn.Principal, now time.Time, expiresAt *time.Time) {
	until := now.Add(KeyCacheTTL)
	if expiresAt != nil && expiresAt.Before(until) {
		until = *expiresAt
	}
	p.RemoteIP = ""
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = map[string]cachedKey{}
	}
	c.m[string(hash)] = cachedKey{p: p, until: until}
}

// forget empties the cache: a key was revoked or a tenant changed.
func (c *keyCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}
