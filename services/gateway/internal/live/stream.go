package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	gotel "github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
)

// tracer is asked for at each push, so that it follows the tracer provider
// installed now (see platform/projection).
func tracer() trace.Tracer {
	return gotel.Tracer("github.com/taskmesh/taskmesh/services/gateway/internal/live")
}

// sink is the transport of one stream (SSE or WebSocket).
type sink interface {
	// send writes one frame; an error means the client is gone or stuck.
	send(ctx context.Context, id int64, event string, data []byte) error
	// keepAlive shows the client (and proxies) that the stream is alive.
	keepAlive(ctx context.Context) error
}

// end says why a stream ended.
type end int

const (
	// endFinal: the final state was sent (or the client already had it).
	endFinal end = iota
	// endSlow: the hub dropped the subscription (ErrSlowConsumer).
	endSlow
	// endIdle: nothing was sent for the idle timeout.
	endIdle
	// endShutdown: the gateway is stopping.
	endShutdown
	// endClient: the client went away, or a write failed.
	endClient
)

func (e end) String() string {
	return [...]string{"final", "slow_consumer", "idle", "shutdown", "client"}[e]
}

// stream pushes one task to one client.
//
// It starts from the scheduler's snapshot (GetTask: read-your-writes), taken
// after subscribing to the hub so nothing published in between is lost. It
// sends the snapshot when it is newer than the client's resume point, then
// applies the hub's events strictly in version order with the scheduler's
// own fold (lifecycle.Apply), so each frame shows what GetTask answers at
// its version: an event at or below the applied version is a duplicate and
// skipped, an event beyond the next version means the tail missed some (it
// started after they were published), and the scheduler's snapshot fills
// the gap, as it does for an event this gateway does not know; one still
// beyond the scheduler's version after that is not the task's and is
// ignored. Frames carry
// the version as their id and are sent only above the client's resume
// point.
type stream struct {
	svc  *Service
	view View
	id   string
	sub  *Subscription

	task    *taskv1.Task // as of applied
	applied int64
	// sent is the last version the client has: its resume point, then the
	// id of each frame sent.
	sent    int64
	deleted bool
	// final: the stream ends after what it is sending.
	final bool
	// unconfirmed: the task looks final but the scheduler could not be
	// asked whether a retry followed; asked again at each keep-alive.
	unconfirmed bool
}

// start records the scheduler's snapshot; the first frame is sent by run.
func (st *stream) start(snap *taskv1.Task) {
	st.task, st.applied = snap, int64(snap.GetVersion())
	st.final = Final(snap.GetStatus())
}

// upToDate reports whether the client already has everything, final state
// included: nothing to stream.
func (st *stream) upToDate() bool { return st.final && st.applied <= st.sent }

// run streams until the task is final, the client goes, the hub drops the
// subscription, the stream idles out or the gateway stops.
func (st *stream) run(ctx context.Context, out sink) (end, error) {
	cfg := st.svc.cfg
	if _, err := st.emit(ctx, out, Update{Task: st.task, Version: st.applied, Final: st.final}, trace.SpanContext{}); err != nil {
		return st.ended(err)
	}
	if st.final {
		return endFinal, nil
	}
	keep := time.NewTicker(cfg.KeepAlive)
	defer keep.Stop()
	idle := time.NewTimer(cfg.IdleTimeout)
	defer idle.Stop()
	for {
		// A dropped subscription wins over its buffered events.
		select {
		case <-st.sub.Dropped():
			return endSlow, st.sub.Err()
		default:
		}
		var sent bool
		var err error
		select {
		case <-ctx.Done():
			return st.ended(ctx.Err())
		case <-st.sub.Dropped():
			return endSlow, st.sub.Err()
		case <-idle.C:
			return endIdle, fmt.Errorf("nothing to send for %s", cfg.IdleTimeout)
		case <-keep.C:
			if err = out.keepAlive(ctx); err == nil && st.unconfirmed {
				st.final = st.confirmFinal(ctx, st.applied)
			}
		case <-st.sub.resync:
			sent, err = st.refresh(ctx, out)
		case d := <-st.sub.events:
			sent, err = st.onEvent(ctx, out, d)
		}
		if err != nil {
			return st.ended(err)
		}
		if sent {
			idle.Reset(cfg.IdleTimeout)
		}
		if st.final {
			return endFinal, nil
		}
	}
}

// ended classifies an error that stopped the stream.
func (st *stream) ended(err error) (end, error) {
	switch {
	case st.svc.stopping.Err() != nil:
		return endShutdown, err
	case st.sub.Err() != nil:
		return endSlow, st.sub.Err()
	}
	return endClient, err
}

// onEvent applies one event from the hub and sends its frame.
func (st *stream) onEvent(ctx context.Context, out sink, d delivery) (bool, error) {
	v := d.event.GetVersion()
	if v <= st.applied {
		return false, nil // already in the snapshot, or a redelivery
	}
	if v > st.applied+1 {
		// The tail missed versions in between: they were published
		// before it started. The scheduler's snapshot has them.
		sent, err := st.refresh(ctx, out)
		if err != nil || st.final || v <= st.applied {
			return sent, err
		}
		if v > st.applied+1 {
			// The scheduler answers with its own committed state, and
			// the relay publishes only what committed: an event beyond
			// it was not published by the relay. Applied, it would make
			// the task's real events look old and stop the stream.
			st.svc.log.Warn("live stream: task event beyond the scheduler's version ignored", "task_id", st.id,
				"scheduler_version", st.applied, "event_version", v)
			return sent, nil
		}
	}
	next, deleted, err := lifecycle.Apply(st.task, d.task())
	if err != nil {
		// An event this gateway has no case for (the scheduler is newer
		// than it): the scheduler's snapshot shows what the event did.
		st.svc.log.Warn("live stream: task event unknown here; reading the task from the scheduler", "task_id", st.id,
			"event_version", v, "err", err)
		return st.refresh(ctx, out)
	}
	st.task, st.deleted, st.applied = next, deleted, v
	final := st.deleted
	switch status := st.task.GetStatus(); {
	case final || !Final(status):
	case status == StatusFailed:
		// Only a failure can be followed by a retry in the same commit.
		final = st.confirmFinal(ctx, v)
	default:
		final = true
	}
	st.final = final
	return st.emit(ctx, out, Update{Task: st.task, Version: v, Event: d.task(), Deleted: st.deleted, Final: final}, d.link)
}

// refresh reads the scheduler's snapshot and sends it when it is ahead of
// what the stream applied.
func (st *stream) refresh(ctx context.Context, out sink) (bool, error) {
	snap, err := st.svc.getTask(ctx, st.id)
	switch {
	case status.Code(err) == codes.NotFound:
		// Deleted since (GetTask hides deleted tasks): the deletion's
		// event is at least the next version.
		st.deleted, st.final, st.applied = true, true, st.applied+1
		return st.emit(ctx, out, Update{Task: st.task, Version: st.applied, Deleted: true, Final: true}, trace.SpanContext{})
	case err != nil:
		// Streaming goes on: the next event or resync tries again.
		st.svc.log.Warn("live stream: reading the task from the scheduler failed", "task_id", st.id, "err", err)
		return false, nil
	case int64(snap.GetVersion()) <= st.applied:
		return false, nil
	}
	st.start(snap)
	st.unconfirmed = false
	return st.emit(ctx, out, Update{Task: st.task, Version: st.applied, Final: st.final}, trace.SpanContext{})
}

// confirmFinal asks the scheduler whether the task, final as of version v,
// stays final: a failed attempt with retries left is followed by a retry
// in the same commit, which the scheduler (read-your-writes) already shows.
func (st *stream) confirmFinal(ctx context.Context, v int64) bool {
	snap, err := st.svc.getTask(ctx, st.id)
	switch {
	case status.Code(err) == codes.NotFound:
		st.unconfirmed = false
		return true // deleted since: nothing more to show
	case err != nil:
		st.unconfirmed = true
		st.svc.log.Warn("live stream: confirming the final state failed", "task_id", st.id, "err", err)
		return false
	}
	st.unconfirmed = false
	return int64(snap.GetVersion()) <= v && Final(snap.GetStatus())
}

// emit renders u and sends it unless the client already has its version.
// The push span links to the trace of the command that caused the event.
func (st *stream) emit(ctx context.Context, out sink, u Update, link trace.SpanContext) (bool, error) {
	if u.Version <= st.sent {
		return false, nil
	}
	u.Task = proto.CloneOf(u.Task)
	f, ok := st.view(u)
	if !ok {
		return false, nil
	}
	data, err := marshalFrame(f.Data)
	if err != nil {
		return false, fmt.Errorf("render frame: %w", err)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("taskmesh.task_id", st.id), attribute.Int64("taskmesh.task_version", u.Version),
		attribute.String("taskmesh.live.event", f.Event), attribute.String("taskmesh.live.change", ChangeName(u.Event)))}
	if link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	ctx, span := tracer().Start(ctx, "live push", opts...)
	err = out.send(ctx, u.Version, f.Event, data)
	span.End()
	if err != nil {
		return false, err
	}
	st.sent = u.Version
	st.svc.frameSent()
	return true, nil
}

// marshalFrame renders a frame's data as one line of JSON. It does not
// escape &, < and > as encoding/json does for HTML: a frame is no HTML, and
// a link in it (a video's video_url) must read as the GET answer's does,
// its query's & a plain &.
func marshalFrame(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
