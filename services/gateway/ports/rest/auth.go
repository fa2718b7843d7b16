package rest

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/logthrottle"
	"github.com/taskmesh/taskmesh/services/gateway/internal/access"
	"github.com/taskmesh/taskmesh/services/gateway/internal/clientip"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// outages writes the failures every request meets while a service, the
// credential store or its database is down as one line per window
// (package logthrottle) instead of one per request.
var outages = logthrottle.New(logthrottle.Window)

// authenticator admits API requests: it authenticates the bearer secret,
// applies the route's kind rule and hands the request, with the principal
// in its context, to next. Authentication comes before anything reads the
// body, so an anonymous caller learns nothing about routes or payloads.
type authenticator struct {
	next    http.Handler
	auth    Authenticator
	trusted []netip.Prefix
	log     *slog.Logger
	// maxBody bounds request bodies (default maxBodyBytes).
	maxBody int64
	// routes are the routes the gateway serves: a path none of them
	// serves is 404 for every caller (nil: every path is taken as served).
	routes routeIndex
}

func (a *authenticator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, access.AgentRoutePrefix) {
		// Agent answers hand out leases and attempt ids (a claim has side
		// effects); no cache may keep or replay them.
		w.Header().Set("Cache-Control", "no-store")
	}
	ip := clientip.Resolve(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), a.trusted)
	bearer, ok := credentials.FromAuthorization(r.Header.Get("Authorization"))
	if !ok {
		bearer, ok = websocketBearer(r)
	}
	if !ok {
		a.refuse(w, r, ip, httperr.New(http.StatusUnauthorized, httperr.CodeUnauthenticated, "missing bearer token"))
		return
	}
	ctx := r.Context()
	if r.Method == http.MethodPost && r.URL.Path == access.HeartbeatRoute {
		ctx = credentials.ForHeartbeat(ctx)
	}
	p, err := a.auth.Authenticate(ctx, bearer, ip)
	if err != nil {
		a.refuse(w, r, ip, a.authProblem(r, err))
		return
	}
	if err := access.Route(p, r.URL.Path); err != nil {
		if a.routes != nil && !a.routes.serves(r.URL.Path) {
			// No route is refused to a kind of credential: a path that
			// does not exist is 404 whoever calls, as the mux answers it
			// for the kinds it lets through (docs/api/README.md#credentials).
			httperr.WriteFor(w, r, httperr.New(http.StatusNotFound, httperr.CodeNoRoute, "no route for "+r.Method+" "+r.URL.Path))
			return
		}
		a.refuse(w, r, ip, httperr.New(http.StatusForbidden, httperr.CodePermissionDenied, err.Error()))
		return
	}
	// The secret has done its job; nothing after this point needs it.
	r.Header.Del("Authorization")
	limit := a.maxBody
	if limit == 0 {
		limit = maxBodyBytes
	}
	if r.ContentLength > limit {
		// Declared too large: refuse before anything (the rate limits
		// reading a video body, a route) waits for bytes it would refuse.
		httperr.WriteFor(w, r, httperr.New(http.StatusRequestEntityTooLarge, httperr.CodeTooLarge,
			fmt.Sprintf("request body too large: at most %d bytes", limit)))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	a.next.ServeHTTP(w, r.WithContext(authn.NewContext(r.Context(), p)))
}

func (a *authenticator) authProblem(r *http.Request, err error) httperr.Problem {
	var ae *credentials.AuthError
	switch {
	case errors.As(err, &ae) && errors.Is(err, credentials.ErrForbidden):
		return httperr.New(http.StatusForbidden, httperr.CodePermissionDenied, ae.Reason)
	case errors.As(err, &ae):
		return httperr.New(http.StatusUnauthorized, httperr.CodeUnauthenticated, ae.Reason)
	}
	outages.Log(r.Context(), a.log, slog.LevelError, "authenticating a request failed", "err", err, "request_id", requestid.FromContext(r.Context()))
	return httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal, "credential store unavailable")
}

// refuse answers an authentication or authorization failure and logs it
// without the secret.
func (a *authenticator) refuse(w http.ResponseWriter, r *http.Request, ip string, p httperr.Problem) {
	a.log.Info("http request refused", "method", r.Method, "path", r.URL.Path, "remote_ip", ip,
		"status", p.HTTPStatus, "reason", p.Detail, "request_id", requestid.FromContext(r.Context()))
	httperr.WriteFor(w, r, p)
}

// WebSocketBearerProtocol is the WebSocket subprotocol that carries a
// bearer secret as the next offered subprotocol, for clients that cannot
// set an Authorization header on a WebSocket (browsers):
// new WebSocket(url, ["taskmesh.bearer", key]). The server selects
// taskmesh.bearer, never echoing the secret.
const WebSocketBearerProtocol = "taskmesh.bearer"

// websocketBearer reads the secret of a WebSocket upgrade that offers
// WebSocketBearerProtocol followed by the secret.
func websocketBearer(r *http.Request) (string, bool) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "", false
	}
	var offered []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			offered = append(offered, strings.TrimSpace(p))
		}
	}
	for i, p := range offered {
		if p == WebSocketBearerProtocol && i+1 < len(offered) && offered[i+1] != "" {
			return offered[i+1], true
		}
	}
	return "", false
}
