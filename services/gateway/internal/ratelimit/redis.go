package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// allowScript is decide() in Lua, run atomically by Redis: it reads every
// key's TAT, decides all charges, and writes the new TATs only when all
// fit. Each key expires when its limit has fully rested, as a missing key
// means exactly that.
//
// KEYS: one per charge. ARGV[1]: now in µs, or 0 to use the Redis server's
// clock (every replica then shares one clock, whatever theirs say). Then,
// per charge: the emission interval (µs, a double), the increment and the
// tolerance (whole µs). The answer is {allowed (0/1), retry after (µs)}
// followed by remaining, reset after and retry after (µs) per charge.
//
// Numbers are Lua doubles, exact for integers below 2^53; string.format
// writes TATs as plain integers (tostring would switch to exponents).
const allowScript = `
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = #KEYS
local tats, nexts, retries = {}, {}, {}
local allowed, retry = 1, 0
for i = 1, n do
  local inc = tonumber(ARGV[3 + (i - 1) * 3])
  local tol = tonumber(ARGV[4 + (i - 1) * 3])
  local v = redis.call('GET', KEYS[i])
  local tat = now
  if v then
    tat = math.max(tonumber(v), now)
  end
  tats[i] = tat
  nexts[i] = tat + inc
  local wait = nexts[i] - tol - now
  retries[i] = 0
  if wait > 0 then
    allowed = 0
    retries[i] = wait
    retry = math.max(retry, wait)
  end
end
local out = {allowed, retry}
for i = 1, n do
  local interval = tonumber(ARGV[2 + (i - 1) * 3])
  local tol = tonumber(ARGV[4 + (i - 1) * 3])
  local at = tats[i]
  if allowed == 1 then
    at = nexts[i]
    if at > now then
      redis.call('SET', KEYS[i], string.format('%d', at), 'PX', math.ceil((at - now) / 1000))
    end
  end
  out[#out + 1] = math.max(0, math.floor((tol - (at - now)) / interval + 1e-9))
  out[#out + 1] = at - now
  out[#out + 1] = retries[i]
end
return out
`

var allow = redis.NewScript(allowScript)

// Redis is a Limiter whose state lives in Redis, shared by every gateway
// replica that uses the same server: a limit holds in total, not per
// replica. Each Allow is one round trip (EVALSHA of a Lua script).
//
// In Redis Cluster all keys of one Allow call must hash to one slot: give
// them a common hash tag, e.g. "rl:{tenant}:…".
type Redis struct {
	client redis.Scripter
	now    func() time.Time
}

// NewRedis returns a limiter on client. now, if not nil, replaces the
// Redis server's clock (tests); production leaves it nil, so that replicas
// whose clocks disagree still agree on the time.
func NewRedis(client redis.Scripter, now func() time.Time) *Redis {
	return &Redis{client: client, now: now}
}

// Allow implements Limiter. A Redis failure is returned as is; the
// decision is then unknown.
func (r *Redis) Allow(ctx context.Context, charges ...Charge) (Decision, error) {
	if err := validate(charges); err != nil {
		return Decision{}, err
	}
	keys := make([]string, len(charges))
	args := make([]any, 1, 1+3*len(charges))
	args[0] = int64(0)
	if r.now != nil {
		args[0] = r.now().UnixMicro()
	}
	for i, c := range charges {
		p := paramsOf(c)
		keys[i] = c.Key
		args = append(args, strconv.FormatFloat(p.interval, 'g', -1, 64), p.increment, p.tolerance)
	}
	res, err := allow.Run(ctx, r.client, keys, args...).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: redis: %w", err)
	}
	if len(res) != 2+3*len(charges) {
		return Decision{}, fmt.Errorf("ratelimit: redis: script answered %d numbers for %d charges", len(res), len(charges))
	}
	d := Decision{Allowed: res[0] == 1, RetryAfter: micros(res[1]), States: make([]State, len(charges))}
	for i := range charges {
		v := res[2+3*i:]
		d.States[i] = State{Remaining: v[0], ResetAfter: micros(v[1]), RetryAfter: micros(v[2])}
	}
	return d, nil
}
