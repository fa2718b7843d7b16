package live

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// WebSocket close statuses and what they tell the client.
const (
	// closeFinal (1000): the final state was sent; do not reconnect.
	closeFinal = websocket.StatusNormalClosure
	// closeReconnect (1001): idle timeout or gateway shutdown; reconnect
	// with after_version set to the last id.
	closeReconnect = websocket.StatusGoingAway
	// closeSlow (1008): the client fell a whole buffer behind; reconnect
	// with after_version and read faster.
	closeSlow = websocket.StatusPolicyViolation
	// closeInternal (1011): the gateway could not render a frame.
	closeInternal = websocket.StatusInternalError
)

// wsMessage is one WebSocket text message: the SSE frame as JSON.
type wsMessage struct {
	ID    int64           `json:"id"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// ServeWebSocket streams task taskID to the caller over a WebSocket, frames
// rendered by view, as text messages {"id","event","data"}. The request
// must carry an authenticated principal. Errors found before the upgrade
// (bad resume point, unknown task, limits) are ordinary HTTP answers with
// the API's error envelope. The server pings every KeepAlive and closes with
// 1000 after the final frame; see the close* constants for the others.
// Clients send nothing: a data message from the client closes the stream.
func (s *Service) ServeWebSocket(w http.ResponseWriter, r *http.Request, taskID string, view View) {
	if !isUpgrade(r) {
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument,
			"this route serves WebSocket connections: send Connection: Upgrade and Upgrade: websocket"))
		return
	}
	st, closeFn, ok := s.open(w, r, taskID, view)
	if !ok {
		return
	}
	defer closeFn()
	c, err := websocket.Accept(w, r, acceptOptions())
	if err != nil {
		return // Accept answered the client
	}
	defer c.CloseNow()
	if st.upToDate() {
		_ = c.Close(closeFinal, "final state already sent")
		return
	}
	ctx, cancel := s.streamContext(r.Context())
	defer cancel()
	s.metrics.started(ctx, "websocket")
	// Reading runs in the background: it answers pings and notices the
	// client's close, which ends the stream. Its context is not the
	// stream's: the library drops the connection when a read's context
	// ends, and a stream ended by shutdown or idleness must still send
	// its close frame.
	clientGone := c.CloseRead(context.WithoutCancel(ctx))
	defer context.AfterFunc(clientGone, cancel)()
	reason, err := st.run(ctx, &wsSink{c: c, svc: s})
	code, text := closeStatus(reason, err)
	_ = c.Close(code, text)
	s.metrics.finished(context.WithoutCancel(ctx), "websocket", reason)
	s.log.Debug("live stream ended", "transport", "websocket", "task_id", taskID, "reason", reason.String(), "err", err)
}

// acceptOptions are the WebSocket handshake's options of every stream.
func acceptOptions() *websocket.AcceptOptions {
	return &websocket.AcceptOptions{
		// Callers authenticate with a bearer header, never a cookie, so a
		// page of another origin cannot ride on a user's session: no
		// origin restriction is needed.
		OriginPatterns: []string{"*"},
		// A browser authenticates with the subprotocol taskmesh.bearer
		// followed by its key (see rest.WebSocketBearerProtocol); the
		// handshake must select one the client offered.
		Subprotocols: []string{"taskmesh.bearer"},
	}
}

// closeStatus is the close frame for a stream that ended for reason.
func closeStatus(reason end, err error) (websocket.StatusCode, string) {
	var code websocket.StatusCode
	var text string
	switch reason {
	case endFinal:
		return closeFinal, "final state sent"
	case endSlow:
		code, text = closeSlow, "slow consumer; reconnect with after_version"
		if err != nil {
			text = err.Error() + "; reconnect with after_version"
		}
	case endIdle:
		code, text = closeReconnect, "idle timeout; reconnect with after_version"
	case endShutdown:
		code, text = closeReconnect, "gateway shutting down; reconnect with after_version"
	default:
		code, text = closeInternal, "stream failed; reconnect with after_version"
	}
	// A close reason is at most 123 bytes.
	if len(text) > 123 {
		text = text[:123]
	}
	return code, text
}

// isUpgrade reports whether r asks for a WebSocket.
func isUpgrade(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket")
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsSink writes frames to a WebSocket.
type wsSink struct {
	c   *websocket.Conn
	svc *Service
}

func (s *wsSink) send(ctx context.Context, id int64, event string, data []byte) error {
	// As the frame itself: marshalling the envelope must not escape what
	// the frame left plain.
	msg, err := marshalFrame(wsMessage{ID: id, Event: event, Data: data})
	if err != nil {
		return err
	}
	ctx, cancel := s.writeContext(ctx)
	defer cancel()
	return s.c.Write(ctx, websocket.MessageText, msg)
}

func (s *wsSink) keepAlive(ctx context.Context) error {
	ctx, cancel := s.writeContext(ctx)
	defer cancel()
	return s.c.Ping(ctx)
}

// writeContext bounds one write by WriteTimeout only. The stream's own
// context ending (shutdown, idle) must not cut a write short: the
// WebSocket library closes the connection when a write's context ends,
// and the client would get no close frame telling it why.
func (s *wsSink) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.svc.cfg.WriteTimeout)
}
