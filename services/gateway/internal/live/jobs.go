package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/services/gateway/internal/apijson"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// Live job streams (GET /jobs/{job_id}/events): the same machinery as the
// task streams — a Hub tailing the job topic, per-tenant limits, keep-
// alives, idle timeouts, slow-consumer and shutdown closes, resumption by
// Last-Event-ID — over jobs. A job changes a handful of times per stage,
// so a stream does not fold events itself: each event of its job makes it
// read the job from the scheduler (read-your-writes) and send it when it is
// newer than what the client has. Frame ids are job versions.

// DefaultJobTopic is the job topic, as JobEvent declares it in
// proto/taskmesh/pipeline/v1/pipeline_events.proto.
var DefaultJobTopic = kafka.EnvelopeTopic(&pipelinev1.JobEvent{})

// JobReader reads one job as the caller may see it;
// pipelinev1.PipelineServiceClient on the gateway's upstream connection is
// one.
type JobReader interface {
	GetJob(ctx context.Context, in *pipelinev1.GetJobRequest, opts ...grpc.CallOption) (*pipelinev1.GetJobResponse, error)
}

// Job statuses that end a stream.
const (
	JobCompleted = "COMPLETED"
	JobFailed    = "FAILED"
)

// jobJSON renders a job as GET /jobs/{job_id} does.
var jobJSON = apijson.Options{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}

// RegisterJobs adds GET <prefix>/events, the SSE stream of a job, to mux;
// prefix ends with {job_id} (e.g. "/jobs/{job_id}"). Without a job topic
// configured (Config.Jobs) it is not added.
func (s *Service) RegisterJobs(mux Router, prefix string) error {
	if !strings.HasSuffix(prefix, "/{job_id}") {
		return fmt.Errorf("live: route prefix %q must end with /{job_id}", prefix)
	}
	return mux.HandlePath(http.MethodGet, prefix+"/events", func(w http.ResponseWriter, r *http.Request, p map[string]string) {
		s.ServeJobSSE(w, r, p["job_id"])
	})
}

// ServeJobSSE streams job jobID to the caller as Server-Sent Events: each
// frame is "id: <version>", "event: status|progress", "data: <the job as
// GET /jobs/{job_id} shows it, with "final">". The first frame is the job
// as it is now unless the client has that version; the stream ends after
// the COMPLETED or FAILED frame, and a client resuming past it gets 204.
func (s *Service) ServeJobSSE(w http.ResponseWriter, r *http.Request, jobID string) {
	switch {
	case s.jobHub == nil || s.cfg.Jobs == nil:
		httperr.WriteFor(w, r, httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal,
			"live job streams are not enabled on this gateway (no Kafka brokers configured); poll GET /jobs/{job_id} instead"))
		return
	case jobID == "":
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, "job id is empty"))
		return
	}
	after, err := resumePoint(r)
	if err != nil {
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument,
			strings.Replace(err.Error(), "a task version", "a job version", 1)))
		return
	}
	p, _ := authn.FromContext(r.Context())
	tenant := p.TenantID
	if tenant == "" {
		tenant = "subject:" + p.Subject
	}
	switch err := s.acquire(tenant); {
	case errors.Is(err, errStopping):
		httperr.WriteFor(w, r, httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal, "gateway shutting down"))
		return
	case err != nil:
		s.metrics.refused(r.Context())
		httperr.WriteFor(w, r, httperr.New(http.StatusTooManyRequests, httperr.CodeTooManyRequests, err.Error()))
		return
	}
	defer s.release(tenant)
	// Subscribe before reading the snapshot, so no change falls between.
	sub := s.jobHub.Subscribe(jobID, p.TenantID)
	defer sub.Close()
	js := &jobStream{svc: s, id: jobID, sub: sub, sent: after}
	snap, err := js.read(r.Context())
	if err != nil {
		pr := httperr.FromError(err)
		if pr.HTTPStatus >= 500 {
			s.log.Error("live job stream: reading the job failed", "job_id", jobID, "err", err,
				"request_id", requestid.FromContext(r.Context()))
		}
		httperr.WriteFor(w, r, pr)
		return
	}
	if jobFinal(snap) && snap.GetVersion() <= after {
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
	// The headers go out at once: a client that resumed at the current
	// version gets no frame until the job changes.
	if err := out.flush(); err != nil {
		s.metrics.finished(ctx, "sse", endClient)
		return
	}
	reason, err := js.run(ctx, out, snap)
	if reason != endFinal && reason != endClient {
		out.close(reason, err)
	}
	_ = rc.SetWriteDeadline(time.Time{})
	s.metrics.finished(context.WithoutCancel(ctx), "sse", reason)
}

func jobFinal(j *pipelinev1.Job) bool {
	return j.GetStatus() == JobCompleted || j.GetStatus() == JobFailed
}

// jobStream pushes one job to one client.
type jobStream struct {
	svc  *Service
	id   string
	sub  *Subscription
	sent int64 // the last version the client has
	// last is the job as the last frame showed it (nil before the first).
	last *pipelinev1.Job
}

func (js *jobStream) read(ctx context.Context) (*pipelinev1.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, getTaskTimeout)
	defer cancel()
	resp, err := js.svc.cfg.Jobs.GetJob(ctx, &pipelinev1.GetJobRequest{JobId: js.id})
	if err != nil {
		return nil, err
	}
	return resp.GetJob(), nil
}

// run sends snap unless the client has it, then the job again after each
// of its events, until it is final or the stream ends otherwise.
func (js *jobStream) run(ctx context.Context, out sink, snap *pipelinev1.Job) (end, error) {
	cfg := js.svc.cfg
	if snap.GetVersion() > js.sent {
		if err := js.emit(ctx, out, snap, EventStatus); err != nil {
			return js.ended(err)
		}
	} else {
		// The client resumed at this version: it has the frame, which
		// the next one is named against.
		js.last = snap
	}
	if jobFinal(snap) {
		return endFinal, nil
	}
	keep := time.NewTicker(cfg.KeepAlive)
	defer keep.Stop()
	idle := time.NewTimer(cfg.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return js.ended(ctx.Err())
		case <-js.sub.Dropped():
			return endSlow, js.sub.Err()
		case <-idle.C:
			return endIdle, fmt.Errorf("nothing to send for %s", cfg.IdleTimeout)
		case <-keep.C:
			if err := out.keepAlive(ctx); err != nil {
				return js.ended(err)
			}
			continue
		case <-js.sub.resync:
		case d := <-js.sub.events:
			if d.event.GetVersion() <= js.sent {
				continue // the client has it
			}
		}
		job, err := js.read(ctx)
		if err != nil {
			// The next event, resync or keep-alive tries again.
			js.svc.log.Warn("live job stream: reading the job failed", "job_id", js.id, "err", err)
			continue
		}
		if job.GetVersion() <= js.sent {
			if jobFinal(job) {
				return endFinal, nil // the client has the end, or says it has
			}
			continue
		}
		if err := js.emit(ctx, out, job, js.eventOf(job)); err != nil {
			return js.ended(err)
		}
		idle.Reset(cfg.IdleTimeout)
		if jobFinal(job) {
			return endFinal, nil
		}
	}
}

// eventOf names the frame that shows job: "progress" when it differs
// from the last frame sent only by its progress (a progress report),
// "status" for any other change (docs/api/pipeline.md, "Live stream").
// The frame is what the job is when it is read, not the event that woke
// the stream: a progress report read after the stage already moved on
// carries the move, and a client that follows only status frames must
// see it. The outputs' download links are left out of the comparison:
// each read signs them anew (their expiry moves with the clock), while
// the keys they link to say whether an output changed.
func (js *jobStream) eventOf(job *pipelinev1.Job) string {
	if js.last == nil {
		return EventStatus
	}
	a, b := proto.CloneOf(js.last), proto.CloneOf(job)
	for _, j := range []*pipelinev1.Job{a, b} {
		j.Progress, j.UpdatedAt, j.Version = 0, nil, 0
		if o := j.GetOutput(); o != nil {
			o.BieUrl, o.NefUrl = nil, nil
		}
	}
	if proto.Equal(a, b) {
		return EventProgress
	}
	return EventStatus
}

func (js *jobStream) ended(err error) (end, error) {
	switch {
	case js.svc.stopping.Err() != nil:
		return endShutdown, err
	case js.sub.Err() != nil:
		return endSlow, js.sub.Err()
	}
	return endClient, err
}

// emit sends the job as a frame: the GET body with "final" added.
func (js *jobStream) emit(ctx context.Context, out sink, job *pipelinev1.Job, event string) error {
	b, err := jobJSON.Marshal(job)
	if err != nil {
		return err
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		return err
	}
	data["final"] = jobFinal(job)
	frame, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if err := out.send(ctx, job.GetVersion(), event, frame); err != nil {
		return err
	}
	js.sent, js.last = job.GetVersion(), job
	js.svc.frameSent()
	return nil
}
