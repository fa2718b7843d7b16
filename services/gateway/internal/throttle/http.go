package throttle

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/logthrottle"
	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// outages writes the failures every request meets while the limits or
// the limiter's store (Redis) cannot be reached as one line per window
// (package logthrottle).
var outages = logthrottle.New(logthrottle.Window)

// tokensOf returns the request's token cost, reading and restoring the
// body of a video generation request.
func (t *Throttle) tokensOf(r *http.Request) (int64, error) {
	if r.Method != http.MethodPost || !videoGenerationPaths[r.URL.Path] {
		return t.cfg.OtherRouteTokens, nil
	}
	body, err := edge.ReadBody(r)
	if err != nil {
		return 0, err
	}
	edge.SetBody(r, body)
	return VideoCost(body, t.cfg.VideoTokensPerSecond), nil
}

// Middleware limits the requests next serves. The principal must be in the
// request's context (authn.NewContext); requests without one pass. Over a
// limit it answers 429 with Retry-After in the route's error envelope
// (httperr.WriteFor); every limited answer, a refusal too, carries
// X-RateLimit-* headers.
func (t *Throttle) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := authn.FromContext(r.Context())
		if !ok || p.Kind != authn.KindUser {
			next.ServeHTTP(w, r)
			return
		}
		tokens, err := t.tokensOf(r)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				httperr.WriteFor(w, r, httperr.New(http.StatusRequestEntityTooLarge, httperr.CodeTooLarge, "request body too large"))
				return
			}
			httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, "request body could not be read"))
			return
		}
		usage, err := t.Check(r.Context(), p, tokens)
		setHeaders(w.Header(), usage)
		var refusal *Refusal
		switch {
		case errors.As(err, &refusal):
			if !refusal.Never {
				w.Header().Set("Retry-After", strconv.FormatInt(refusal.RetryAfterSeconds(), 10))
			}
			httperr.WriteFor(w, r, httperr.New(http.StatusTooManyRequests, httperr.CodeTooManyRequests, refusal.Reason))
			return
		case err != nil:
			outages.Log(r.Context(), t.log, slog.LevelError, "reading rate limits failed", "err", err, "request_id", requestid.FromContext(r.Context()))
			httperr.WriteFor(w, r, httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal, "rate limits unavailable"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// setHeaders writes X-RateLimit-{Limit,Remaining,Reset}-{Requests,Tokens};
// Reset is in whole seconds, rounded up.
func setHeaders(h http.Header, u Usage) {
	// These headers go on every answer: they are set by their canonical
	// keys, worked out once, and their values share one allocation, each
	// a slice capped at its one value so that an Add to one header
	// cannot write over the next.
	values := make([]string, 0, 6)
	value := func(v int64) []string {
		values = append(values, strconv.FormatInt(v, 10))
		n := len(values)
		return values[n-1 : n : n]
	}
	for i, w := range [...]*Window{u.Requests, u.Tokens} {
		if w == nil {
			continue
		}
		keys := &rateLimitHeaders[i]
		h[keys.limit] = value(w.Limit)
		h[keys.remaining] = value(w.Remaining)
		h[keys.reset] = value(int64(math.Ceil(w.ResetAfter.Seconds())))
	}
}

// rateLimitHeaders are the canonical keys of the requests' and the
// tokens' headers, in setHeaders' order.
var rateLimitHeaders = func() (keys [2]struct{ limit, remaining, reset string }) {
	for i, suffix := range []string{"Requests", "Tokens"} {
		keys[i].limit = http.CanonicalHeaderKey("X-RateLimit-Limit-" + suffix)
		keys[i].remaining = http.CanonicalHeaderKey("X-RateLimit-Remaining-" + suffix)
		keys[i].reset = http.CanonicalHeaderKey("X-RateLimit-Reset-" + suffix)
	}
	return keys
}()

// GRPCError checks a gRPC front-door call by p (RPM and the flat token
// cost; the front door does not decode messages) and returns nil when it
// may proceed, ResourceExhausted with a RetryInfo detail when a limit is
// exceeded, or Unavailable when the limits could not be read.
func (t *Throttle) GRPCError(ctx context.Context, p authn.Principal) error {
	_, err := t.Check(ctx, p, t.cfg.OtherRouteTokens)
	var refusal *Refusal
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refusal):
		st := status.New(codes.ResourceExhausted, refusal.Reason)
		if !refusal.Never {
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(refusal.RetryAfter)}); derr == nil {
				st = d
			}
		}
		return st.Err()
	default:
		outages.Log(ctx, t.log, slog.LevelError, "reading rate limits failed", "err", err)
		return status.Error(codes.Unavailable, "rate limits unavailable")
	}
}
