package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ServeSSE streams task taskID to the caller as Server-Sent Events, frames
// rendered by view. The request must carry an authenticated principal.
//
// Each frame is "id: <version>", "event: <name>", "data: <JSON>"; comment
// lines keep the connection alive. The response ends after the final
// frame; a client that reconnects with that id (EventSource does, with
// Last-Event-ID) gets 204, which tells EventSource to stop. A stream that
// ends for another reason (idle timeout, slow consumer, shutdown) sends a
// "close" event {"reason": …} without an id first, so a reconnect resumes
// where the last frame left off.
func (s *Service) ServeSSE(w http.ResponseWriter, r *http.Request, taskID string, view View) {
	st, closeFn, ok := s.open(w, r, taskID, view)
	if !ok {
		return
	}
	defer closeFn()
	if st.upToDate() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	out := &sseSink{w: w, rc: rc, timeout: s.cfg.WriteTimeout}
	ctx, cancel := s.streamContext(r.Context())
	defer cancel()
	s.metrics.started(ctx, "sse")
	if err := out.flush(); err != nil {
		s.metrics.finished(ctx, "sse", endClient)
		return
	}
	reason, err := st.run(ctx, out)
	if reason != endFinal && reason != endClient {
		out.close(reason, err)
	}
	// The server writes the response's end after the handler: give it a
	// fresh deadline.
	_ = rc.SetWriteDeadline(time.Time{})
	s.metrics.finished(context.WithoutCancel(ctx), "sse", reason)
	s.log.Debug("live stream ended", "transport", "sse", "task_id", taskID, "reason", reason.String(), "err", err)
}

// sseSink writes frames to an SSE response.
type sseSink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *sseSink) send(_ context.Context, id int64, event string, data []byte) error {
	// data is one line of JSON: encoding/json escapes newlines in strings.
	if err := s.write(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", id, event, data)); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseSink) keepAlive(context.Context) error {
	if err := s.write(": keep-alive\n\n"); err != nil {
		return err
	}
	return s.flush()
}

// close tells the client why a stream ends before the final state.
func (s *sseSink) close(reason end, err error) {
	msg := map[string]string{"reason": reason.String()}
	if err != nil && !errors.Is(err, context.Canceled) {
		msg["message"] = err.Error()
	}
	data, _ := json.Marshal(msg)
	if s.write(fmt.Sprintf("event: close\ndata: %s\n\n", data)) == nil {
		_ = s.flush()
	}
}

func (s *sseSink) write(text string) error {
	// A client that stops reading blocks the write once the socket's
	// buffers are full; the deadline turns that into an error.
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err := s.w.Write([]byte(text))
	return err
}

func (s *sseSink) flush() error {
	err := s.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}
