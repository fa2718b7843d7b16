package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/apijson"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// This file streams task groups. A group's stream is fed by the
// scheduler's WatchTaskGroup (the group as of each change, the members
// that changed), not by the task topic: a group changes as its process
// manager records it, and the scheduler already answers with what a
// client should see. Frames have the task streams' shape and rules: id is
// the group's version, resuming with Last-Event-ID or after_version, keep
// alive, idle timeout, per-tenant limits, shutdown.

// GroupWatcher opens a group's watch as the caller (the principal in ctx);
// taskv1.TaskGroupServiceClient on the gateway's upstream connection is
// one.
type GroupWatcher interface {
	WatchTaskGroup(ctx context.Context, in *taskv1.WatchTaskGroupRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[taskv1.WatchTaskGroupResponse], error)
}

// EventGroup is the event name of every group frame.
const EventGroup = "group"

// groupJSON renders frames like the task-group API's JSON.
var groupJSON = apijson.Options{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}, NullOptional: true}

// groupFrame renders one watch message: the group's fields as GET shows
// them (tasks: every member in the first frame, then the members that
// changed), plus change ("snapshot" for the first frame, "changed") and
// final.
func groupFrame(g *taskv1.TaskGroup, first, final bool) ([]byte, error) {
	raw, err := groupJSON.Marshal(g)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	change := "changed"
	if first {
		change = "snapshot"
	}
	m["change"], _ = json.Marshal(change)
	m["final"], _ = json.Marshal(final)
	return json.Marshal(m)
}

// groupSettled reports whether a group has ended and every member with it:
// nothing follows.
func groupSettled(g *taskv1.TaskGroup) bool {
	switch g.GetStatus() {
	case "completed", "failed", "cancelled":
	default:
		return false
	}
	c := g.GetCounts()
	return c.GetPending()+c.GetAssigned()+c.GetRunning()+c.GetPreempted()+c.GetSuspended() == 0
}

// Groups reports whether group streams are served (Config.Groups is set).
func (s *Service) Groups() bool { return s.cfg.Groups != nil }

// RegisterGroups adds a group API's stream routes to mux: GET
// <prefix>/events (SSE) and GET <prefix>/ws (WebSocket), where prefix ends
// with {group_id}. They need Config.Groups.
func (s *Service) RegisterGroups(mux Router, prefix string) error {
	if !strings.HasSuffix(prefix, "/{group_id}") {
		return fmt.Errorf("live: route prefix %q must end with /{group_id}", prefix)
	}
	if s.cfg.Groups == nil {
		return errors.New("live: Config.Groups is nil")
	}
	for suffix, serve := range map[string]func(http.ResponseWriter, *http.Request, string){
		"/events": s.ServeGroupSSE, "/ws": s.ServeGroupWebSocket} {
		err := mux.HandlePath(http.MethodGet, prefix+suffix, func(w http.ResponseWriter, r *http.Request, p map[string]string) {
			serve(w, r, p["group_id"])
		})
		if err != nil {
			return fmt.Errorf("live: route %s%s: %w", prefix, suffix, err)
		}
	}
	return nil
}

// groupStream is one client's stream of one group.
type groupStream struct {
	svc      *Service
	id       string
	sent     int64 // the client's resume point, then each frame's id
	first    *taskv1.TaskGroup
	messages chan *taskv1.TaskGroup
	errs     chan error
	cancel   context.CancelFunc
}

// openGroup checks a stream request, opens the scheduler's watch as the
// caller and reads its first message. On a refusal it has answered with
// the API's error envelope and returns false; otherwise the caller must
// call close when the stream ends.
func (s *Service) openGroup(w http.ResponseWriter, r *http.Request, groupID string) (*groupStream, func(), bool) {
	if groupID == "" {
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, "group id is empty"))
		return nil, nil, false
	}
	after, _, slot, ok := s.admit(w, r)
	if !ok {
		return nil, nil, false
	}
	// The watch lives as long as the stream: cancelled by the client
	// going, the gateway stopping, or the stream ending.
	ctx, cancel := s.streamContext(r.Context())
	st := &groupStream{svc: s, id: groupID, sent: after, messages: make(chan *taskv1.TaskGroup, 16), errs: make(chan error, 1), cancel: cancel}
	closeFn := func() { cancel(); s.release(slot) }
	watch, err := s.cfg.Groups.WatchTaskGroup(ctx, &taskv1.WatchTaskGroupRequest{Id: groupID})
	if err == nil {
		var first *taskv1.WatchTaskGroupResponse
		if first, err = watch.Recv(); err == nil {
			st.first = first.GetGroup()
		}
	}
	if err != nil {
		closeFn()
		s.openFailed(w, r, err, "live group stream: watching the group failed", "group_id", groupID)
		return nil, nil, false
	}
	go func() {
		for {
			m, err := watch.Recv()
			if err != nil {
				st.errs <- err
				return
			}
			select {
			case st.messages <- m.GetGroup():
			case <-ctx.Done():
				return
			}
		}
	}()
	return st, closeFn, true
}

// upToDate reports whether the client already has the final state.
func (st *groupStream) upToDate() bool {
	return groupSettled(st.first) && st.first.GetVersion() <= st.sent
}

// run sends the first message (unless the client has its version) and
// every later one until the group settles, the client goes, the stream
// idles out or the gateway stops.
func (st *groupStream) run(ctx context.Context, out sink) (end, error) {
	cfg := st.svc.cfg
	if done, err := st.emit(ctx, out, st.first, true); err != nil || done {
		return st.ended(err)
	}
	keep := time.NewTicker(cfg.KeepAlive)
	defer keep.Stop()
	idle := time.NewTimer(cfg.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return st.ended(ctx.Err())
		case <-idle.C:
			return endIdle, fmt.Errorf("nothing to send for %s", cfg.IdleTimeout)
		case <-keep.C:
			if err := out.keepAlive(ctx); err != nil {
				return st.ended(err)
			}
		case err := <-st.errs:
			if errors.Is(err, io.EOF) {
				return endFinal, nil // the scheduler ends the watch once the group settled
			}
			return st.ended(err)
		case g := <-st.messages:
			done, err := st.emit(ctx, out, g, false)
			if err != nil || done {
				return st.ended(err)
			}
			idle.Reset(cfg.IdleTimeout)
		}
	}
}

// emit sends one message's frame when the client does not have its
// version; done reports that the group settled.
func (st *groupStream) emit(ctx context.Context, out sink, g *taskv1.TaskGroup, first bool) (done bool, err error) {
	final := groupSettled(g)
	if g.GetVersion() <= st.sent {
		return final, nil
	}
	data, err := groupFrame(g, first, final)
	if err != nil {
		return false, fmt.Errorf("render frame: %w", err)
	}
	if err := out.send(ctx, g.GetVersion(), EventGroup, data); err != nil {
		return false, err
	}
	st.sent = g.GetVersion()
	st.svc.frameSent()
	return final, nil
}

func (st *groupStream) ended(err error) (end, error) {
	switch {
	case err == nil:
		return endFinal, nil
	case st.svc.stopping.Err() != nil:
		return endShutdown, err
	}
	return endClient, err
}

// ServeGroupSSE streams group groupID as Server-Sent Events ("id: <group
// version>", "event: group", "data: <the group as JSON>"), like ServeSSE
// streams a task.
func (s *Service) ServeGroupSSE(w http.ResponseWriter, r *http.Request, groupID string) {
	st, closeFn, ok := s.openGroup(w, r, groupID)
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
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sseSink{w: w, rc: rc, timeout: s.cfg.WriteTimeout}
	ctx, cancel := s.streamContext(r.Context())
	defer cancel()
	s.metrics.started(ctx, "sse")
	reason, err := st.run(ctx, out)
	if reason != endFinal && reason != endClient {
		out.close(reason, err)
	}
	_ = rc.SetWriteDeadline(time.Time{})
	s.metrics.finished(context.WithoutCancel(ctx), "sse", reason)
}

// ServeGroupWebSocket streams group groupID over a WebSocket, like
// ServeWebSocket streams a task.
func (s *Service) ServeGroupWebSocket(w http.ResponseWriter, r *http.Request, groupID string) {
	if !isUpgrade(r) {
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument,
			"this route serves WebSocket connections: send Connection: Upgrade and Upgrade: websocket"))
		return
	}
	st, closeFn, ok := s.openGroup(w, r, groupID)
	if !ok {
		return
	}
	defer closeFn()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: []string{"*"}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	if st.upToDate() {
		_ = c.Close(closeFinal, "final state already sent")
		return
	}
	ctx, cancel := s.streamContext(r.Context())
	defer cancel()
	s.metrics.started(ctx, "websocket")
	clientGone := c.CloseRead(context.WithoutCancel(ctx))
	defer context.AfterFunc(clientGone, cancel)()
	reason, err := st.run(ctx, &wsSink{c: c, svc: s})
	code, text := closeStatus(reason, err)
	_ = c.Close(code, text)
	s.metrics.finished(context.WithoutCancel(ctx), "websocket", reason)
}

// OpenAPIGroupPaths documents the group stream routes under prefix (ending
// with {group_id}) for the gateway's OpenAPI document; frameRef is the
// frame's definition.
func OpenAPIGroupPaths(prefix, tag, frameRef string) map[string]any {
	paths := OpenAPIPaths(prefix, tag, frameRef)
	events := paths[prefix+"/events"].(map[string]any)["get"].(map[string]any)
	events["summary"] = "Live task group progress as Server-Sent Events"
	events["description"] = "A text/event-stream of the group's changes. Each frame is `id: <group version>`, " +
		"`event: group` and `data: <frame JSON>`: the group as GET /api/v1/task-groups/{group_id} shows it, " +
		"with `tasks` holding every member in the first frame (`change`: \"snapshot\") and the members that " +
		"changed in later ones (`change`: \"changed\"). The stream ends once the group and all its members have " +
		"ended (`final` true). Resuming (Last-Event-ID, after_version), keep-alives, 204 and `event: close` " +
		"work as for task streams."
	ws := paths[prefix+"/ws"].(map[string]any)["get"].(map[string]any)
	ws["summary"] = "Live task group progress over a WebSocket"
	ws["description"] = "A WebSocket carrying the SSE frames as text messages {\"id\": <group version>, " +
		"\"event\": \"group\", \"data\": <frame>}; close codes as for task streams."
	return paths
}

// GroupFrameSchema is the OpenAPI definition of a group frame.
func GroupFrameSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"description": "One frame of a live task group stream: the group as the task-group API shows it " +
			"(taskmesh.task.v1.TaskGroup fields), plus change and final.",
		"allOf": []any{map[string]any{"$ref": "#/definitions/v1TaskGroup"}},
		"properties": map[string]any{
			"change": map[string]any{"type": "string", "description": "\"snapshot\" (first frame: every member) or \"changed\" (the members that changed)."},
			"final":  map[string]any{"type": "boolean", "description": "Last frame of the stream: the group and its members have ended."},
		},
	}
}
