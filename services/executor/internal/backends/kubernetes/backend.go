package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/holder"
	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// TaskType is the only task type the backend claims.
const TaskType = "video"

// Config configures a backend. Zero durations take the defaults noted.
type Config struct {
	// AgentID is the backend's identity on the lease API (its agent token
	// is bound to it); MachineID defaults to it.
	AgentID, MachineID string
	Labels             []string
	// Slots is the number of jobs held at once (default 16): Kueue queues
	// them in the cluster, this only bounds what one backend leases.
	Slots int
	// ClaimWait is the long-poll wait of a claim (default 30 s, at most 60 s).
	ClaimWait time.Duration
	// PollInterval is how often a job's conditions are read (default 5 s).
	PollInterval time.Duration
	// RenewInterval is the lease renewal interval (default 30 s; sooner when
	// a third of the lease is left).
	RenewInterval time.Duration
	// HeartbeatInterval of SendHeartbeat, which carries cancel and preempt
	// (default 5 s).
	HeartbeatInterval time.Duration
	// RPCTimeout bounds every call but the long-poll claim (default 10 s).
	RPCTimeout time.Duration
	// AgentLostAfter is the scheduler's --agent-lost-after (default 15 s).
	// The backend deletes its jobs before the server may lease their
	// tasks again: a fence of 12 s by default (holder.Config.Fence).
	AgentLostAfter time.Duration
	// Render configures the jobs.
	Render RenderConfig
	// Logs reads the master pod's log for progress lines; nil reads only
	// the job's progress annotation.
	Logs PodLogs
	// Videos is the jobs' bucket: a succeeded job's video is uploaded from
	// it as the task's result object, which the video API serves as
	// video_url. Nil reports only the video's S3 location.
	Videos VideoSource
	// HTTP uploads the videos (default: a client with a 10-minute timeout).
	HTTP   *http.Client
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.AgentID == "" {
		return c, errors.New("agent id is required")
	}
	if c.MachineID == "" {
		c.MachineID = c.AgentID
	}
	if c.Slots <= 0 {
		c.Slots = 16
	}
	if c.ClaimWait <= 0 {
		c.ClaimWait = 30 * time.Second
	}
	c.ClaimWait = min(c.ClaimWait, 60*time.Second)
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.RenewInterval <= 0 {
		c.RenewInterval = 30 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 10 * time.Second
	}
	if c.AgentLostAfter <= 0 {
		c.AgentLostAfter = 15 * time.Second
	}
	if err := c.holder().CheckFence(); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 10 * time.Minute}
	}
	c.Render.AgentID = c.AgentID
	c.Render = c.Render.withDefaults()
	if c.Render.S3Endpoint == "" || c.Render.S3Bucket == "" {
		return c, errors.New("the S3 endpoint and bucket of the videos are required")
	}
	return c, nil
}

// holder is the lease side's configuration.
func (c Config) holder() holder.Config {
	f, _ := fence.Times(c.AgentLostAfter)
	return holder.Config{
		AgentID: c.AgentID, MachineID: c.MachineID, Labels: c.Labels, Slots: c.Slots, Types: []string{TaskType},
		ClaimWait: c.ClaimWait, RPCTimeout: c.RPCTimeout, RenewInterval: c.RenewInterval, HeartbeatInterval: c.HeartbeatInterval,
		Fence: f,
	}
}

// Backend claims video tasks and runs them as PyTorchJobs.
type Backend struct {
	cfg   Config
	log   *slog.Logger
	lease *holder.Holder[*run] // the attempts held, by attempt id
	jobs  dynamic.ResourceInterface
	// pods are the jobs' pods, killed at once when the fence passes.
	pods dynamic.ResourceInterface
}

// run is one attempt held as a PyTorchJob.
type run struct {
	holder.Attempt
	job string
	// leaseExpires is the lease's end as the server last said.
	leaseExpires time.Time
	// stop receives the server's stop reason (cancelled, preempted, ...).
	stop chan string
	// progress and progressMsg were reported last (progress -1: nothing yet).
	progress    int
	progressMsg string
}

func newRun(taskID, attemptID, job string) *run {
	return &run{Attempt: holder.Attempt{TaskID: taskID, AttemptID: attemptID}, job: job, stop: make(chan string, 1), progress: -1}
}

// New returns a backend that leases through lease and keeps its jobs in
// the configured namespace of client.
func New(cfg Config, lease taskv1.LeaseServiceClient, client dynamic.Interface) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	log := cfg.Logger.With("backend", "kubernetes", "agent_id", cfg.AgentID)
	return &Backend{
		cfg: cfg, log: log, jobs: client.Resource(PyTorchJobs).Namespace(cfg.Render.Namespace),
		pods:  client.Resource(Pods).Namespace(cfg.Render.Namespace),
		lease: holder.New(cfg.holder(), lease, log, func(r *run) chan<- string { return r.stop }),
	}, nil
}

// Run claims and follows jobs until ctx ends. Jobs keep running in the
// cluster after it returns; a backend with the same agent id picks them up.
func (b *Backend) Run(ctx context.Context) error {
	if err := b.adopt(ctx); err != nil {
		return err
	}
	b.lease.Go(func() { b.lease.ClaimLoop(ctx, func(t *taskv1.Task) { b.accept(ctx, t) }) })
	b.lease.Go(func() { b.lease.HeartbeatLoop(ctx) })
	b.log.Info("kubernetes backend started", "namespace", b.cfg.Render.Namespace, "slots", b.cfg.Slots)
	<-ctx.Done()
	b.lease.Wait()
	return nil
}

// adopt resumes following the jobs this backend left running.
func (b *Backend) adopt(ctx context.Context) error {
	list, err := b.jobs.List(ctx, metav1.ListOptions{LabelSelector: AgentLabel + "=" + labelValue(b.cfg.AgentID)})
	if err != nil {
		return fmt.Errorf("list PyTorchJobs: %w", err)
	}
	for i := range list.Items {
		job := &list.Items[i]
		a := job.GetAnnotations()
		r := newRun(a[TaskAnnotation], a[AttemptAnno], job.GetName())
		if r.TaskID == "" || r.AttemptID == "" || !b.lease.Hold(r.AttemptID, r) {
			continue
		}
		b.log.Info("following the job of an earlier run", "task_id", r.TaskID, "job", r.job)
		b.lease.Go(func() { b.follow(ctx, r, nil) })
	}
	return nil
}

// accept holds a claimed video task and follows its job.
func (b *Backend) accept(ctx context.Context, t *taskv1.Task) {
	r := newRun(t.GetId(), t.GetAttemptId(), JobName(t.GetId()))
	if t.GetLeaseExpiresAt() != nil {
		r.leaseExpires = t.GetLeaseExpiresAt().AsTime()
	}
	if !b.lease.Hold(r.AttemptID, r) {
		return
	}
	b.lease.Go(func() { b.follow(ctx, r, t) })
}

// follow submits the task's job (task nil: the job exists already) and maps
// its conditions to the lease API until the attempt ends.
func (b *Backend) follow(ctx context.Context, r *run, t *taskv1.Task) {
	defer b.lease.Release(r.AttemptID)
	log := b.log.With("task_id", r.TaskID, "attempt_id", r.AttemptID, "job", r.job)
	if t != nil {
		job, err := Render(t, b.cfg.Render)
		if err != nil {
			log.Warn("task refused", "err", err)
			b.complete(ctx, r, -1, "", "render PyTorchJob: "+err.Error(), nil)
			return
		}
		if err := b.submit(ctx, r, job); err != nil {
			if ctx.Err() == nil {
				log.Warn("job not submitted", "err", err)
				b.complete(ctx, r, -1, "", err.Error(), nil)
			}
			return
		}
		log.Info("job submitted", "queue", job.GetLabels()[QueueLabel])
	}
	started := false
	poll := time.NewTicker(b.cfg.PollInterval)
	defer poll.Stop()
	renew := time.NewTimer(0) // verify the lease at once (an adopted job's may be gone)
	if t != nil {
		renew.Reset(b.lease.RenewDelay(r.leaseExpires))
	}
	defer renew.Stop()
	check := time.NewTimer(0)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case reason := <-r.stop:
			if reason == holder.Fenced {
				// The server has not answered for the fence and may lease
				// the task elsewhere: the job goes, and the attempt is
				// reported failed once the server answers (it refuses the
				// report if it has moved on).
				log.Warn("fence passed: deleting the job and its pods")
				b.deleteJob(log, r.job)
				b.killPods(log, r.job)
				b.complete(ctx, r, -1, "", fence.Message(b.lease.Fence()), nil)
				return
			}
			// The server decided (cancelled, preempted, lease lost): the job
			// goes, nothing is reported.
			log.Info("server stops the attempt", "reason", reason)
			b.deleteJob(log, r.job)
			return
		case <-renew.C:
			expires, err := b.lease.Renew(ctx, r.Attempt)
			switch {
			case rpcerr.AttemptGone(err):
				log.Info("lease lost: deleting the job", "err", err)
				b.deleteJob(log, r.job)
				return
			case err != nil:
				log.Warn("lease renewal failed", "err", err)
				renew.Reset(min(b.lease.RenewDelay(r.leaseExpires), 2*time.Second))
			default:
				if !expires.IsZero() {
					r.leaseExpires = expires
				}
				renew.Reset(b.lease.RenewDelay(r.leaseExpires))
			}
		case <-poll.C:
		case <-check.C:
		}
		job, err := b.jobs.Get(ctx, r.job, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			log.Warn("job deleted behind the backend's back")
			b.complete(ctx, r, -1, "", fmt.Sprintf("PyTorchJob %s was deleted before it finished", r.job), nil)
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("read job", "err", err)
			}
			continue
		}
		phase, msg := JobPhase(job)
		if phase != Queued && !started {
			if err := b.start(ctx, r); err != nil {
				if rpcerr.AttemptGone(err) {
					log.Info("attempt gone at start: deleting the job", "err", err)
					b.deleteJob(log, r.job)
					return
				}
				continue // retried at the next poll
			}
			started = true
		}
		switch phase {
		case Running:
			if v, m, ok := b.jobProgress(ctx, job); ok {
				b.reportProgress(ctx, r, v, m)
			}
		case Succeeded, Failed:
			exit, stdout := 1, ""
			var video *taskv1.ResultObject
			if phase == Succeeded {
				exit, stdout, msg = 0, b.resultJSON(r.job), ""
				if b.cfg.Videos != nil {
					var err error
					if video, err = b.uploadVideo(ctx, r); err != nil {
						if ctx.Err() != nil {
							return // the next run uploads it
						}
						// A succeeded job whose video cannot be served has
						// not produced what the task promised.
						log.Warn("video not uploaded", "err", err)
						exit, msg = 1, "the job succeeded but its video could not be uploaded: "+err.Error()
					}
				}
			}
			// Until the server has the outcome the job keeps its label: a
			// backend stopped meanwhile reports it after its restart.
			if b.complete(ctx, r, exit, stdout, msg, video) {
				b.forget(log, r.job)
			}
			return
		}
	}
}

// submit creates the job. A job of the same name from this attempt (a
// retried create) is kept; one left by an earlier attempt of the task is
// replaced.
func (b *Backend) submit(ctx context.Context, r *run, job *unstructured.Unstructured) error {
	for try := 0; ; try++ {
		_, err := b.jobs.Create(ctx, job, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			if transientAPI(err) && try < 5 {
				holder.Sleep(ctx, time.Duration(try+1)*time.Second)
				continue
			}
			return fmt.Errorf("create PyTorchJob %s: %w", r.job, err)
		}
		old, gerr := b.jobs.Get(ctx, r.job, metav1.GetOptions{})
		if gerr == nil && old.GetAnnotations()[AttemptAnno] == r.AttemptID {
			return nil
		}
		if try >= 10 {
			return fmt.Errorf("create PyTorchJob %s: a job of an earlier attempt is still there", r.job)
		}
		if gerr == nil && old.GetDeletionTimestamp() == nil {
			b.deleteJob(b.log, r.job)
		}
		if !holder.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

func transientAPI(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// deleteJob removes a job and its pods.
func (b *Backend) deleteJob(log *slog.Logger, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RPCTimeout)
	defer cancel()
	policy := metav1.DeletePropagationBackground
	if err := b.jobs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil && !apierrors.IsNotFound(err) {
		log.Error("delete job", "err", err)
	}
}

// killPods deletes a job's pods with the fence's kill grace: deleting
// the job alone leaves them to the garbage collector, which gives each its
// own termination grace (30 s by default), longer than the server waits.
func (b *Backend) killPods(log *slog.Logger, job string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RPCTimeout)
	defer cancel()
	list, err := b.pods.List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + job})
	if err != nil {
		log.Error("list the job's pods", "err", err)
		return
	}
	_, grace := fence.Times(b.cfg.AgentLostAfter)
	seconds := int64(grace / time.Second) // rounded down: never later than the fence allows
	for _, p := range list.Items {
		if err := b.pods.Delete(ctx, p.GetName(), metav1.DeleteOptions{GracePeriodSeconds: &seconds}); err != nil && !apierrors.IsNotFound(err) {
			log.Error("delete pod", "pod", p.GetName(), "err", err)
		}
	}
}

// forget takes the backend's label off a finished job: its outcome is
// reported, and a restarted backend must not report it again. The job
// stays for inspection until the operator's TTL removes it.
func (b *Backend) forget(log *slog.Logger, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RPCTimeout)
	defer cancel()
	patch := []byte(`{"metadata":{"labels":{"` + AgentLabel + `":null}}}`)
	if _, err := b.jobs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		log.Warn("unlabel finished job", "err", err)
	}
}

// start reports the job running (StartTask is idempotent).
func (b *Backend) start(ctx context.Context, r *run) error {
	expires, err := b.lease.Start(ctx, r.Attempt)
	if err != nil {
		return err
	}
	if !expires.IsZero() {
		r.leaseExpires = expires
	}
	return nil
}

// complete reports the attempt's outcome, retrying while the server is
// unreachable. It reports whether the server answered for good: it took
// the outcome, or refused it (the attempt is no longer this backend's).
func (b *Backend) complete(ctx context.Context, r *run, exit int, stdout, errText string, video *taskv1.ResultObject) bool {
	return b.lease.Complete(ctx, &taskv1.CompleteTaskRequest{
		TaskId: r.TaskID, AttemptId: r.AttemptID, ExitCode: int32(exit), Stdout: stdout,
		Error: textcut.Bytes(errText, 4096), ResultObject: video, EndedAt: timestamppb.Now(),
	}, b.log.With("task_id", r.TaskID, "attempt_id", r.AttemptID))
}

// Result is the stdout of a succeeded job: where the model put the video.
type Result struct {
	S3EndpointURL string `json:"s3_endpoint_url"`
	S3Bucket      string `json:"s3_bucket"`
	S3KeyPrefix   string `json:"s3_key_prefix"`
	// S3URL is s3://<bucket>/<key prefix>/.
	S3URL string `json:"s3_url"`
}

func (b *Backend) resultJSON(job string) string {
	raw, _ := json.Marshal(Result{
		S3EndpointURL: b.cfg.Render.S3Endpoint, S3Bucket: b.cfg.Render.S3Bucket, S3KeyPrefix: job,
		S3URL: "s3://" + b.cfg.Render.S3Bucket + "/" + job + "/",
	})
	return string(raw)
}
