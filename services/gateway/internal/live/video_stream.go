package live

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/coder/websocket"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// RegisterVideo adds the video API's two stream routes under prefix
// (ending in /{task_id}), which answer as the video API's GET does
// (docs/api/video.md#live-streams). The generation is read through videos
// as the caller before the stream opens, so another tenant's generation is
// refused as GET refuses it (403 AccessDenied), and one GET reports
// UNKNOWN — unknown, deleted, past its 24 hours, or a task that is no
// generation — gets one final UNKNOWN frame rather than a stream of a task
// the API does not show. Frames are VideoView's; the SUCCEEDED one links
// to the video.
func (s *Service) RegisterVideo(mux Router, prefix string, videos VideoReader) error {
	if videos == nil {
		return errors.New("live: nil video reader")
	}
	return s.register(mux, prefix, func(ws bool, serve transport) serveFunc {
		return func(w http.ResponseWriter, r *http.Request, taskID string) {
			// What the transport refuses before reading the task (no
			// Kafka, no id, not a WebSocket handshake, a bad resume
			// point) it answers itself, as on the task API's streams.
			_, badResume := resumePoint(r)
			if s.hub == nil || taskID == "" || (ws && !isUpgrade(r)) || badResume != nil {
				serve(w, r, taskID, VideoView)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), getTaskTimeout)
			g, err := videos.GetVideoGeneration(ctx, &videov1.GetVideoGenerationRequest{TaskId: taskID})
			cancel()
			if err != nil {
				p := httperr.FromError(err)
				if p.HTTPStatus >= 500 {
					s.log.Error("live stream: reading the generation failed", "task_id", taskID, "err", err,
						"request_id", requestid.FromContext(r.Context()))
				}
				httperr.WriteFor(w, r, p)
				return
			}
			if g.GetData().GetTaskStatus() == videoUnknown {
				s.serveUnknownVideo(w, r, taskID, ws)
				return
			}
			serve(w, r, taskID, s.videoResultView(r.Context(), videos))
		}
	})
}

// serveUnknownVideo answers a stream of a generation the video API reports
// UNKNOWN: one final frame saying so (id 0: there is no task version), as
// the GET answer would. A client resuming (Last-Event-ID or after_version
// sent) already has it: SSE answers 204, which stops EventSource's
// reconnecting, and a WebSocket closes normally at once.
func (s *Service) serveUnknownVideo(w http.ResponseWriter, r *http.Request, taskID string, ws bool) {
	resumed := r.Header.Get("Last-Event-ID") != "" || r.URL.Query().Get("after_version") != ""
	data, err := marshalFrame(VideoFrame{TaskID: taskID, TaskIDCamel: taskID, TaskStatus: videoUnknown,
		StatusCamel: videoUnknown, Final: true})
	if err != nil {
		httperr.WriteFor(w, r, httperr.New(http.StatusInternalServerError, httperr.CodeInternal, "render frame"))
		return
	}
	if !ws {
		if resumed {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprintf(w, "id: 0\nevent: %s\ndata: %s\n\n", EventStatus, data)
		return
	}
	c, err := websocket.Accept(w, r, acceptOptions())
	if err != nil {
		return // Accept answered the client
	}
	defer c.CloseNow()
	if !resumed {
		msg, _ := marshalFrame(wsMessage{ID: 0, Event: EventStatus, Data: data})
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
		err := c.Write(ctx, websocket.MessageText, msg)
		cancel()
		if err != nil {
			return
		}
	}
	_ = c.Close(closeFinal, "final state sent")
}
