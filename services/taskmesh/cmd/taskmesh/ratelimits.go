package main

import (
	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// rateLimitFlags are the gateway's rate-limit flags, shared by `gateway`
// and `dev`; each also reads TASKMESH_<FLAG> (package flagenv).
type rateLimitFlags struct {
	set                      *pflag.FlagSet
	redisURL, redisURLFile   string
	premiumRPM, premiumTPM   int
	standardRPM, standardTPM int
	videoTokensPerSecond     int64
	otherRouteTokens         int64
}

func (r *rateLimitFlags) add(f *pflag.FlagSet) {
	def := gateway.DefaultTierLimits()
	s := pflag.NewFlagSet("rate limits", pflag.ContinueOnError)
	s.StringVar(&r.redisURL, "redis-url", "", "Redis shared by every gateway replica for the rate limits, redis://[:password@]host:port/db (empty: in-process limits, right for one replica only; prefer --redis-url-file)")
	s.StringVar(&r.redisURLFile, "redis-url-file", "", "file holding the Redis URL")
	s.IntVar(&r.premiumRPM, "premium-rpm", def[gateway.TierPremium].RPM, "default requests per minute of a premium tenant (0: unlimited)")
	s.IntVar(&r.premiumTPM, "premium-tpm", def[gateway.TierPremium].TPM, "default tokens per minute of a premium tenant (0: unlimited)")
	s.IntVar(&r.standardRPM, "standard-rpm", def[gateway.TierStandard].RPM, "default requests per minute of a standard tenant (0: unlimited)")
	s.IntVar(&r.standardTPM, "standard-tpm", def[gateway.TierStandard].TPM, "default tokens per minute of a standard tenant (0: unlimited)")
	s.Int64Var(&r.videoTokensPerSecond, "video-tokens-per-second", gateway.DefaultVideoTokensPerSecond, "tokens a video generation costs per second of video, besides one per prompt character (0: this default)")
	s.Int64Var(&r.otherRouteTokens, "route-tokens", 0, "tokens every other request costs (0: limited by RPM only)")
	r.set = s
	f.AddFlagSet(s)
}

// config applies the environment to the flags not given and returns the
// gateway's configuration.
func (r *rateLimitFlags) config() (gateway.RateLimits, error) {
	if err := flagenv.Apply(r.set); err != nil {
		return gateway.RateLimits{}, err
	}
	url, err := flagenv.Secret(r.redisURL, r.redisURLFile)
	if err != nil {
		return gateway.RateLimits{}, err
	}
	return gateway.RateLimits{
		RedisURL: url,
		Tiers: map[string]gateway.Limits{
			gateway.TierPremium:  {RPM: r.premiumRPM, TPM: r.premiumTPM},
			gateway.TierStandard: {RPM: r.standardRPM, TPM: r.standardTPM},
		},
		VideoTokensPerSecond: r.videoTokensPerSecond,
		OtherRouteTokens:     r.otherRouteTokens,
	}, nil
}
