package slurm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	agentv1 "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/holder"
	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/resultupload"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// run is one attempt held as a Slurm job.
type run struct {
	holder.Attempt
	// task is the task as claimed; nil for an adopted job without a record.
	task  *taskv1.Task
	mode  Mode
	jobID int64
	// submitted is when the job was submitted (zero: adopted, it exists).
	submitted time.Time
	adopted   bool
	// leaseExpires is the lease's end as the server last said.
	leaseExpires time.Time
	// stop receives the server's stop reason (cancelled, preempted, ...).
	stop chan string
	// signal receives a placeholder's start signal.
	signal chan startReport

	// What the attempt has done so far.
	started      bool
	runningSince time.Time
	lastMessage  string
	lastProgress int
	reportedAt   time.Time
	// steppedAt is when the job's state was last acted on.
	steppedAt time.Time
	// signalledJob is the job as the start signal said or slurmctld
	// answered after it: running, and newer than any listing sent before
	// it. unconfirmed is the job as a signal acted on said, until
	// slurmctld has answered about it (confirmStart).
	signalledJob, unconfirmed Job
	// limitLowered: the job's time limit was cut to the task's timeout.
	limitLowered bool
	progress     *progressTail
	// agent and localID: the node's agent running a placement, once bound;
	// createTried: a creation was sent (its answer may have been lost).
	agent       *nodeAgent
	localID     string
	createTried bool
	// unfenced: the node's agent does not take fence renewals (one older
	// than the backend); the task is read, not renewed.
	unfenced bool
}

func newRun(taskID, attemptID string, task *taskv1.Task) *run {
	return &run{Attempt: holder.Attempt{TaskID: taskID, AttemptID: attemptID}, task: task, stop: make(chan string, 1), signal: make(chan startReport, 1), lastProgress: -1}
}

func (b *Backend) runLog(r *run) *slog.Logger {
	return b.log.With("task_id", r.TaskID, "attempt_id", r.AttemptID, "job_id", r.jobID)
}

// begin submits a claimed task's job and follows it.
func (b *Backend) begin(ctx context.Context, r *run) {
	log := b.runLog(r)
	spec, err := b.cfg.Job.jobSpec(r.task)
	if err != nil {
		log.Warn("task refused", "err", err)
		b.finish(ctx, r, outcome{exitCode: -1, err: "slurm backend: " + err.Error()}, "", "", nil)
		b.lease.Release(r.AttemptID)
		return
	}
	if b.signal != nil {
		spec.Script = signallingPlaceholderScript
		for k, v := range b.signal.env(r.AttemptID) {
			spec.Env[k] = v
		}
	}
	if err := b.store.save(r.task, 0); err != nil {
		// Without its record the attempt could not be resumed after a
		// restart; running it anyway is still right (Slurm has the job).
		log.Warn("record attempt", "err", err)
	}
	r.submitted = time.Now()
	id, err := b.submit(ctx, r, spec)
	if err != nil {
		if ctx.Err() != nil {
			b.lease.Release(r.AttemptID)
			return
		}
		msg := err.Error()
		var api *APIError
		if errors.As(err, &api) {
			msg = "slurm refused the job: " + api.Message()
		}
		log.Warn("job not submitted", "err", err)
		b.finish(ctx, r, outcome{exitCode: -1, err: msg}, "", "", nil)
		b.lease.Release(r.AttemptID)
		return
	}
	r.jobID = id
	if err := b.store.save(r.task, id); err != nil {
		log.Warn("record job id", "err", err)
	}
	b.runLog(r).Info("job submitted", "name", spec.Name, "gpus", spec.GPUs, "cpus", spec.CPUs, "memory_mb", spec.MemoryMB)
	if b.signal == nil {
		// Without the start signal the listing is how the start is seen:
		// the sooner it shows the job, the sooner its reason is.
		b.watch.kick()
	}
	b.follow(ctx, r)
}

// submit submits the job once. When the answer is lost (slurmrestd or the
// connection failed), slurmctld may have the job all the same: it is
// looked for by its comment before submitting again.
func (b *Backend) submit(ctx context.Context, r *run, spec JobSpec) (int64, error) {
	for try := 0; ; try++ {
		id, err := b.slurm.Submit(ctx, spec)
		if err == nil {
			return id, nil
		}
		if !Transient(err) || try >= 5 {
			return 0, err
		}
		b.runLog(r).Warn("job submission failed; looking for it before trying again", "err", err)
		if !holder.Sleep(ctx, time.Duration(try+1)*time.Second) {
			return 0, ctx.Err()
		}
		if jobs, lerr := b.slurm.Jobs(ctx); lerr == nil {
			for _, j := range jobs {
				if ref, ok := parseComment(j.Comment); ok && ref.AgentID == b.cfg.AgentID && ref.AttemptID == r.AttemptID {
					return j.ID, nil
				}
			}
		} else {
			// Not knowing whether the job exists, submitting again could
			// run the attempt twice: keep asking.
			try--
		}
	}
}

// follow maps the job's states onto the lease API until the attempt ends.
func (b *Backend) follow(ctx context.Context, r *run) {
	defer b.lease.Release(r.AttemptID)
	unfollow := b.watch.follow(r.jobID)
	defer unfollow()
	renew := time.NewTimer(b.lease.RenewDelay(r.leaseExpires))
	if r.adopted {
		renew.Reset(0) // an adopted attempt may be gone already
	}
	defer renew.Stop()
	// look brings a running attempt's next look a PollInterval after the
	// last one, whether or not a listing comes then: listings come at
	// their own pace (every PollInterval at most), and an end seen on the
	// node a whole interval late would hold the allocation that long.
	look := time.NewTimer(time.Hour)
	look.Stop()
	defer look.Stop()
	for {
		j, listed, known, next := b.watch.job(r.jobID, r.submitted)
		if known && !listed {
			// Not in the list: ask for it alone before concluding.
			jj, err := b.slurm.Job(ctx, r.jobID)
			switch {
			case errors.Is(err, ErrJobNotFound):
				b.vanished(ctx, r)
				return
			case err == nil:
				j, listed = jj, true
			}
		}
		if r.started && listed && j.State == StatePending && r.signalledJob.ID == r.jobID {
			// A listing older than the start signal: the signal, or the
			// job read that confirmed the start, is the newer word.
			j = r.signalledJob
		}
		// A running attempt is looked at (its node's agent asked, its
		// progress file read) once a PollInterval, not at every listing:
		// the listings come faster while other jobs wait to start. Its
		// job's end is acted on at once.
		due := !r.started || j.Final() || time.Since(r.steppedAt) >= b.cfg.PollInterval
		if r.unconfirmed.ID != 0 && due {
			// The read that went with the signal had no answer: ask again.
			began := time.Now()
			jj, err := b.slurm.Job(ctx, r.jobID)
			r.steppedAt = time.Now()
			if b.confirmStart(ctx, r, r.unconfirmed, jobRead{job: jj, err: err, took: time.Since(began)}) {
				return
			}
			if r.unconfirmed.ID == 0 && err == nil {
				j, listed, known = jj, true, true
			}
		}
		if known && listed && due {
			r.steppedAt = time.Now()
			if b.step(ctx, r, j) {
				return
			}
		}
		if r.started {
			b.watch.started(r.jobID)
			wait := b.cfg.PollInterval - time.Since(r.steppedAt)
			if wait <= 0 {
				// Due and yet not looked at (the job could not be read):
				// the next try is a whole interval on, not a busy loop.
				wait = b.cfg.PollInterval
			}
			look.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-look.C:
		case reason := <-r.stop:
			if reason == holder.Fenced {
				b.fenced(ctx, r)
				return
			}
			b.runLog(r).Info("server stops the attempt", "reason", reason)
			b.abandon(r)
			return
		case s := <-r.signal:
			if b.signalled(ctx, r, s) {
				return
			}
		case <-renew.C:
			if !b.renew(ctx, r) {
				b.abandon(r)
				return
			}
			renew.Reset(b.lease.RenewDelay(r.leaseExpires))
		case <-next:
		}
	}
}

// signalled: the placeholder says it runs (signal.go). When the signal
// says enough for the hand-off (taskGPUs), the task goes to the node it
// names at once, and slurmctld's word on the job, read meanwhile, confirms
// it (confirmStart); otherwise the job is read first and acted on as a
// listing would be. It reports whether the attempt is over.
func (b *Backend) signalled(ctx context.Context, r *run, s startReport) bool {
	if r.started || s.jobID != r.jobID {
		return false
	}
	if said, ok := s.job(taskGPUs(r.task)); ok && r.task != nil {
		read := make(chan jobRead, 1)
		go func() {
			began := time.Now()
			j, err := b.slurm.Job(ctx, r.jobID)
			read <- jobRead{job: j, err: err, took: time.Since(began)}
		}()
		b.runLog(r).Info("start signal", "node", s.node, "acted_on", "signal", "waited_ms", time.Since(s.received).Milliseconds())
		r.signalledJob, r.steppedAt = said, time.Now()
		if b.step(ctx, r, said) {
			return true
		}
		return b.confirmStart(ctx, r, said, <-read)
	}
	began := time.Now()
	j, err := b.slurm.Job(ctx, r.jobID)
	b.runLog(r).Info("start signal", "job_read_ms", time.Since(began).Milliseconds(), "acted_on", "job read",
		"waited_ms", began.Sub(s.received).Milliseconds())
	if err != nil {
		b.runLog(r).Warn("read the job that signalled its start; the listing will show it", "err", err)
		return false
	}
	if j.State != StateRunning {
		b.runLog(r).Warn("start signal for a job slurmctld does not run", "state", j.State)
		return false
	}
	r.signalledJob = j
	r.steppedAt = time.Now()
	return b.step(ctx, r, j)
}

// jobRead is one read of a job from slurmctld.
type jobRead struct {
	job  Job
	err  error
	took time.Duration
}

// confirmStart checks a start acted on by its signal against slurmctld's
// read of the job. Running on the signal's node confirms it (and is the
// newer word against older listings); an end is acted on as any end; a
// job slurmctld holds pending, or runs elsewhere, means the signal was
// not its placeholder's: the task stops on the node and the attempt
// fails. Without an answer it is asked again at the attempt's next look.
func (b *Backend) confirmStart(ctx context.Context, r *run, said Job, read jobRead) bool {
	log := b.runLog(r)
	j, err := read.job, read.err
	r.unconfirmed = Job{}
	switch {
	case errors.Is(err, ErrJobNotFound):
		if r.agent != nil {
			b.stopLocal(r)
		}
		b.vanished(ctx, r)
		return true
	case err != nil:
		log.Warn("read the job that signalled its start; asked again at the next look", "err", err)
		r.unconfirmed = said
		return false
	case j.Final() || j.Completing:
		return b.step(ctx, r, j)
	case (j.State == StateRunning || j.State == StateSuspended) && j.FirstNode() == said.FirstNode():
		log.Info("start confirmed by slurmctld", "job_read_ms", read.took.Milliseconds(), "nodes", j.Nodes)
		r.signalledJob = j
		return false
	}
	msg := fmt.Sprintf("slurm backend: a start signal named node %s for job %d, but slurmctld has the job %s on %q",
		said.FirstNode(), r.jobID, j.State, j.Nodes)
	log.Error("start signal contradicted by slurmctld", "err", msg)
	if r.agent != nil {
		b.stopLocal(r)
	}
	return b.failPlacement(ctx, r, msg)
}

// taskGPUs is the GPUs per node the task asks for (0 when unknown).
func taskGPUs(t *taskv1.Task) int {
	res, err := taskResources(t.GetResources())
	if err != nil {
		return 0
	}
	return res.GPUs
}

// step acts on the job's state; it reports whether the attempt is over.
func (b *Backend) step(ctx context.Context, r *run, j Job) bool {
	switch {
	case j.Final():
		if !r.started && !j.StartTime.IsZero() && j.State != StateCancelled {
			// It ran between two polls: the task's record says it started.
			_ = b.start(ctx, r)
		}
		if r.mode == ModePlacement {
			return b.placeholderEnded(ctx, r, j)
		}
		return b.batchEnded(ctx, r, j)
	case j.State == StatePending:
		if r.started {
			return false // a listing older than the start signal
		}
		return b.pending(ctx, r, j)
	case j.State == StateRunning || j.State == StateSuspended:
		if r.mode == ModePlacement {
			return b.placementRunning(ctx, r, j)
		}
		return b.batchRunning(ctx, r, j)
	}
	return false // completing or passing between states: wait
}

// pending keeps the task assigned and shows Slurm's reason on it.
func (b *Backend) pending(ctx context.Context, r *run, j Job) bool {
	return b.report(ctx, r, 0, pendingMessage(j))
}

// report sends progress when it changed (at most once a second for the
// same message); it reports whether the attempt is gone.
func (b *Backend) report(ctx context.Context, r *run, progress int, msg string) bool {
	if progress == r.lastProgress && msg == r.lastMessage {
		return false
	}
	if msg == r.lastMessage && time.Since(r.reportedAt) < time.Second {
		return false // the next poll sends the newest
	}
	err := b.lease.Progress(ctx, r.Attempt, progress, msg)
	switch {
	case rpcerr.AttemptGone(err):
		b.runLog(r).Info("attempt gone", "err", err)
		b.abandon(r)
		return true
	case err != nil:
		b.runLog(r).Warn("report progress", "err", err)
		return false
	}
	r.lastProgress, r.lastMessage, r.reportedAt = progress, msg, time.Now()
	return false
}

// markStarted marks the attempt running on the server once; it reports
// whether the attempt is gone. The running message is the caller's to
// report: a placement reports it once the task is on its node, so that
// the starts of a scheduling pass, which come together, are not queued
// behind each other's progress reports.
func (b *Backend) markStarted(ctx context.Context, r *run, j Job) bool {
	if r.started {
		return false
	}
	began := time.Now()
	if err := b.start(ctx, r); err != nil {
		if rpcerr.AttemptGone(err) {
			b.runLog(r).Info("attempt gone at start", "err", err)
			b.abandon(r)
			return true
		}
		return false // retried at the next poll
	}
	r.started, r.runningSince = true, time.Now()
	b.runLog(r).Info("job running", "nodes", j.Nodes, "start_task_ms", time.Since(began).Milliseconds())
	return false
}

// start reports the attempt running (StartTask is idempotent).
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

// batchRunning reports the start and the script's progress, and brings
// the task's timeout to the second: the job's time limit is the timeout in
// whole minutes (Slurm's unit), so when the timeout passes the limit is
// cut to nothing and slurmctld ends the job as TIMEOUT (SIGTERM, KillWait,
// SIGKILL) at its next check. Where that cannot be said (v0.0.38, or no
// operator rights) the whole-minute limit ends it.
func (b *Backend) batchRunning(ctx context.Context, r *run, j Job) bool {
	wasStarted := r.started
	if b.markStarted(ctx, r, j) {
		return true
	}
	if !wasStarted && r.started && b.report(ctx, r, 0, runningMessage(j)) {
		return true
	}
	if r.progress == nil {
		r.progress = &progressTail{stdoutPath: b.cfg.Job.stdoutPath(r.AttemptID), progressPath: b.cfg.Job.progressPath(r.AttemptID)}
	}
	if v, msg, ok := r.progress.poll(); ok {
		if msg == "" {
			msg = runningMessage(j)
		}
		if b.report(ctx, r, v, msg) {
			return true
		}
	}
	if r.task != nil && r.task.GetTimeout() > 0 && !r.limitLowered && r.started &&
		time.Since(r.runningSince) >= time.Duration(r.task.GetTimeout())*time.Second {
		b.lowerTimeLimit(ctx, r)
	}
	return false
}

func (b *Backend) lowerTimeLimit(ctx context.Context, r *run) {
	r.limitLowered = true // once, whatever the answer
	log := b.runLog(r)
	if err := b.slurm.EndAtTimeLimit(ctx, r.jobID); err != nil {
		log.Info("timeout reached; the job's whole-minute time limit ends it", "timeout_sec", r.task.GetTimeout(), "reason", err)
		return
	}
	log.Info("timeout reached: Slurm ends the job", "timeout_sec", r.task.GetTimeout())
}

// batchEnded reports a batch job's outcome with its output.
func (b *Backend) batchEnded(ctx context.Context, r *run, j Job) bool {
	o := batchOutcome(j)
	if j.State == StateTimeout && r.task != nil && r.task.GetTimeout() > 0 {
		o.err = fmt.Sprintf("%s: timeout after %ds", stateError(j), r.task.GetTimeout())
	}
	stdoutPath, stderrPath := b.cfg.Job.stdoutPath(r.AttemptID), b.cfg.Job.stderrPath(r.AttemptID)
	out := collectOutput(stdoutPath, stderrPath, b.cfg.OutputLimit)
	var obj *taskv1.ResultObject
	if out.object != nil {
		var err error
		obj, err = resultupload.Upload(ctx, b.lease.Client(), b.cfg.HTTP,
			resultupload.Attempt{TaskID: r.TaskID, AgentID: b.cfg.AgentID, AttemptID: r.AttemptID},
			resultupload.Bytes(out.object, "application/json"), b.cfg.RPCTimeout)
		if err != nil {
			b.runLog(r).Warn("upload output; reporting its tails only", "err", err)
		}
	}
	b.runLog(r).Info("job ended", "state", j.State, "exit_code", o.exitCode, "err", o.err)
	if b.finish(ctx, r, o, out.stdout, out.stderr, obj) {
		for _, p := range []string{stdoutPath, stderrPath, b.cfg.Job.progressPath(r.AttemptID)} {
			_ = os.Remove(p)
		}
	}
	return true
}

// placementRunning binds the task to the node Slurm allocated: the node's
// agent runs it, and its progress and end are relayed. The attempt is
// started as soon as Slurm runs the placeholder: the allocation is the
// task's from then on, whatever the hand-over to the node takes.
func (b *Backend) placementRunning(ctx context.Context, r *run, j Job) bool {
	if r.agent == nil {
		var bound bool
		var failure string
		if !r.started && b.leaseFresh(r) {
			var gone bool
			if gone, bound, failure = b.startAlongside(ctx, r, j); gone {
				return true
			}
		} else {
			if b.markStarted(ctx, r, j) {
				return true
			}
			bound, failure = b.bind(ctx, r, j)
		}
		if failure != "" {
			return b.failPlacement(ctx, r, failure)
		}
		if !bound {
			// The allocation is held for the node's agent: say where.
			return b.report(ctx, r, 0, runningMessage(j))
		}
	} else if b.markStarted(ctx, r, j) {
		return true
	}
	log := b.runLog(r)
	lt, err := b.readPlaced(ctx, r)
	if errors.Is(err, ErrLocalTaskNotFound) {
		return b.failPlacement(ctx, r, fmt.Sprintf("the agent of node %s lost the task", r.agent.node))
	}
	if err != nil {
		log.Warn("read the task on the node", "err", err)
		return false
	}
	if !localTaskFinal(lt) {
		return b.report(ctx, r, int(lt.GetProgress()), runningMessage(j))
	}
	o := localOutcome(lt)
	log.Info("task ended on the node", "status", lt.GetStatus(), "exit_code", o.exitCode)
	b.finish(ctx, r, o, lt.GetStdout(), lt.GetStderr(), nil)
	b.cancelJob(r)
	return true
}

// readPlaced reads the task on its node. Each read renews the task's
// fence there to what is left of the backend's own (decision 0109):
// should the backend die or freeze, the node's agent stops the task by
// the moment the backend would have. A node's agent that has no renewal
// route (older than the backend) answers it "not found"; the task is
// then read instead, unfenced, rather than failed as lost.
func (b *Backend) readPlaced(ctx context.Context, r *run) (*agentv1.LocalTask, error) {
	left := b.lease.FenceLeft()
	if left <= 0 || r.unfenced {
		return r.agent.get(ctx, r.localID)
	}
	lt, err := r.agent.renew(ctx, r.localID, left)
	if !errors.Is(err, ErrLocalTaskNotFound) {
		return lt, err
	}
	lt, err = r.agent.get(ctx, r.localID)
	if err == nil {
		r.unfenced = true
		b.runLog(r).Warn("the node's agent does not renew fences (it is older than the backend): its task runs unfenced, and would outlive a dead backend",
			"node", r.agent.node)
	}
	return lt, err
}

// bind hands the task to the agent of the node Slurm allocated, once
// that agent has shown it is the node's (its machine id is the node's
// name). A task is created there only when none of this attempt can
// exist yet or none is found: a restarted backend, or a creation whose
// answer was lost, finds the one already there. bound reports that the
// task is on the node now; failure, that it can never be (the placement
// fails with it), and it is the caller's to report: an outcome must not
// overtake a StartTask still on its way (startAlongside).
func (b *Backend) bind(ctx context.Context, r *run, j Job) (bound bool, failure string) {
	log := b.runLog(r)
	if r.task == nil {
		return false, "slurm backend: restarted without a record of the task; it cannot be handed to the node"
	}
	node := j.FirstNode()
	agent, err := b.agents.resolve(node)
	if err != nil {
		return false, "slurm backend: " + err.Error()
	}
	if err := b.checkMachine(ctx, agent); err != nil {
		if errors.Is(err, errWrongMachine) {
			return false, "slurm backend: " + err.Error()
		}
		log.Warn("node's agent unreachable; the allocation is held", "node", node, "err", err)
		return false, ""
	}
	var lt *agentv1.LocalTask
	if r.adopted || r.createTried {
		if lt, err = agent.find(ctx, localTaskName(r.AttemptID)); err != nil {
			log.Warn("node's agent unreachable; the allocation is held", "node", node, "err", err)
			return false, ""
		}
	}
	began := time.Now()
	if lt == nil {
		// Handed over only with a fence left to give: the backend is
		// stopping its attempts otherwise (fenceLoop).
		left := b.lease.FenceLeft()
		if left < minFenceToHandOver {
			return false, ""
		}
		_, grace := fence.Times(b.cfg.AgentLostAfter)
		r.createTried = true
		if lt, err = agent.create(ctx, localTaskSpec(r.task, j), left, grace); err != nil {
			var ae *agentError
			if errors.As(err, &ae) && ae.Status/100 == 4 {
				return false, fmt.Sprintf("the agent of node %s refused the task: %s", node, ae.Message)
			}
			log.Warn("hand the task to the node's agent", "node", node, "err", err)
			return false, ""
		}
	}
	r.agent, r.localID = agent, lt.GetId()
	log.Info("task bound to the node's agent", "node", node, "local_task_id", r.localID, "hand_off_ms", time.Since(began).Milliseconds())
	return true, ""
}

// minFenceToHandOver is the least fence a task is handed to its node
// with (the local API's least fence_ms).
const minFenceToHandOver = time.Second

// startAlongsideMargin is how much of the lease must be left for the
// hand-off to the node to go alongside StartTask.
const startAlongsideMargin = 10 * time.Second

// leaseFresh reports whether the attempt's lease, as the server last
// said, runs long enough that it certainly still runs when the task
// starts on the node.
func (b *Backend) leaseFresh(r *run) bool {
	return !r.leaseExpires.IsZero() && time.Until(r.leaseExpires) > startAlongsideMargin
}

// startAlongside sends StartTask while the task is handed to the node's
// agent, as an agent starts a freshly claimed task (decision 0077): the
// task's process begins one StartTask round trip sooner, and during a
// scheduling pass, when slurmd launches many placeholders on the same
// cores, that round trip is the longest step. The lease still runs (see
// leaseFresh); no outcome is reported before StartTask is answered; an
// answer that the attempt is gone stops the task on the node (abandon).
// gone reports that; bound and failure are bind's.
func (b *Backend) startAlongside(ctx context.Context, r *run, j Job) (gone, bound bool, failure string) {
	type answer struct {
		expires time.Time
		err     error
	}
	answered := make(chan answer, 1)
	began := time.Now()
	attempt := r.Attempt
	go func() {
		var a answer
		a.expires, a.err = b.lease.Start(ctx, attempt)
		answered <- a
	}()
	bound, failure = b.bind(ctx, r, j)
	a := <-answered
	switch {
	case a.err == nil:
		if !a.expires.IsZero() {
			r.leaseExpires = a.expires
		}
		r.started, r.runningSince = true, time.Now()
		b.runLog(r).Info("job running", "nodes", j.Nodes, "start_task_ms", time.Since(began).Milliseconds(), "alongside_hand_off", true)
	case rpcerr.AttemptGone(a.err):
		b.runLog(r).Info("attempt gone at start", "err", a.err)
		b.abandon(r)
		return true, bound, ""
	default:
		// Not started on the server yet: the next poll sends StartTask
		// again (markStarted); the task runs on the node meanwhile, on a
		// lease that still runs.
		b.runLog(r).Warn("start task not acknowledged", "err", a.err)
	}
	return false, bound, failure
}

// checkMachine asks a node's agent for its machine id, at most once a
// minute per node: agents do not change machines.
func (b *Backend) checkMachine(ctx context.Context, agent *nodeAgent) error {
	b.mu.Lock()
	at, ok := b.checked[agent.base]
	b.mu.Unlock()
	if ok && time.Since(at) < time.Minute {
		return nil
	}
	if err := agent.checkMachine(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	b.checked[agent.base] = time.Now()
	b.mu.Unlock()
	return nil
}

// localOutcome is the outcome of a task the node's agent ran.
func localOutcome(lt *agentv1.LocalTask) outcome {
	if lt.GetStatus() == "completed" {
		return outcome{}
	}
	// Only someone on the node cancels a task there while the attempt is
	// still running: the backend's own stops (stopLocal) come after the
	// attempt ended, and nothing reads the task again.
	o := outcome{exitCode: -1, err: lt.GetError(), cancelled: lt.GetStatus() == "cancelled"}
	if lt.ExitCode != nil {
		o.exitCode = int(lt.GetExitCode())
	}
	if o.err == "" && o.exitCode == 0 {
		o.err = "the task " + lt.GetStatus() + " on the node"
	}
	return o
}

// placeholderEnded: the placeholder ended while the attempt was still
// Taskmesh's (it is cancelled only after the outcome is delivered), so
// Slurm ended it: time limit, node failure, preemption or an operator.
// The task on the node is stopped.
func (b *Backend) placeholderEnded(ctx context.Context, r *run, j Job) bool {
	if r.agent == nil && r.task != nil {
		// A restarted backend may find its placeholder ended: the task may
		// have been handed over before the restart.
		if agent, err := b.agents.resolve(j.FirstNode()); err == nil && j.FirstNode() != "" {
			if lt, err := agent.find(ctx, localTaskName(r.AttemptID)); err == nil && lt != nil {
				r.agent, r.localID = agent, lt.GetId()
			}
		}
	}
	if r.agent != nil {
		if lt, err := r.agent.get(ctx, r.localID); err == nil && localTaskFinal(lt) && lt.GetStatus() != "cancelled" {
			// The task ended on its own before the placeholder did (the
			// outcome was not delivered yet): that is the outcome.
			b.finish(ctx, r, localOutcome(lt), lt.GetStdout(), lt.GetStderr(), nil)
			return true
		}
		b.stopLocal(r)
	}
	o := placementOutcome(j)
	b.runLog(r).Info("placeholder ended", "state", j.State, "reason", j.Reason)
	b.finish(ctx, r, o, "", "", nil)
	return true
}

// failPlacement ends an attempt that cannot run on the node: the
// placeholder goes and the failure is reported.
func (b *Backend) failPlacement(ctx context.Context, r *run, msg string) bool {
	b.runLog(r).Warn("placement failed", "err", msg)
	b.finish(ctx, r, outcome{exitCode: -1, err: msg}, "", "", nil)
	b.cancelJob(r)
	return true
}

// vanished: slurmctld does not know the job (it ended and was purged
// while nobody watched, or an operator removed it).
func (b *Backend) vanished(ctx context.Context, r *run) {
	b.runLog(r).Warn("job unknown to slurmctld")
	if r.agent != nil {
		b.stopLocal(r)
	}
	b.finish(ctx, r, outcome{exitCode: -1, err: fmt.Sprintf("slurm: job %d is unknown to slurmctld", r.jobID)}, "", "", nil)
}

// abandon ends an attempt the server took away (cancelled, preempted,
// lease lost): the task on the node stops, the job is cancelled, nothing
// is reported.
func (b *Backend) abandon(r *run) { b.abandonWithin(r, nil) }

// abandonWithin is abandon with the grace the task on the node is given
// between SIGTERM and SIGKILL (nil: its own).
func (b *Backend) abandonWithin(r *run, grace *time.Duration) {
	if r.agent != nil {
		b.stopLocalWithin(r, grace)
	}
	b.cancelJob(r)
	b.store.remove(r.AttemptID)
	if r.mode == ModeBatch {
		for _, p := range []string{b.cfg.Job.stdoutPath(r.AttemptID), b.cfg.Job.stderrPath(r.AttemptID), b.cfg.Job.progressPath(r.AttemptID)} {
			_ = os.Remove(p)
		}
	}
}

// fenced ends an attempt whose fence passed (holder.Fenced): the server
// may lease the task elsewhere soon, so the task on the node is stopped
// with the fence's kill grace, not its own, and the job is cancelled (its
// processes then die Slurm's KillWait later), and the attempt is reported
// failed once the server answers. In the last moments before its timeout
// the server may still hold the attempt, and must then learn that its job
// is gone; otherwise it refuses the report.
func (b *Backend) fenced(ctx context.Context, r *run) {
	msg := fence.Message(b.lease.Fence())
	b.runLog(r).Warn("fence passed: cancelling the job", "job_id", r.jobID)
	_, grace := fence.Times(b.cfg.AgentLostAfter)
	b.abandonWithin(r, &grace)
	b.complete(ctx, r, outcome{exitCode: -1, err: msg}, "", "", nil)
}

// cancelJob cancels the attempt's job (scancel), retrying while slurmrestd
// is unreachable.
func (b *Backend) cancelJob(r *run) {
	if r.jobID == 0 {
		return
	}
	for try := 0; try < 5; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.slurm.Cancel(ctx, r.jobID)
		cancel()
		if err == nil {
			b.runLog(r).Info("job cancelled")
			b.watch.kick()
			return
		}
		b.runLog(r).Warn("cancel job", "err", err)
		if !Transient(err) {
			return
		}
		time.Sleep(time.Duration(try+1) * time.Second)
	}
}

// stopLocal stops the task on the node's agent.
func (b *Backend) stopLocal(r *run) { b.stopLocalWithin(r, nil) }

// stopLocalWithin stops the task on the node's agent with grace between
// SIGTERM and SIGKILL (nil: the task's own).
func (b *Backend) stopLocalWithin(r *run, grace *time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.agent.cancel(ctx, r.localID, grace); err != nil {
		b.runLog(r).Warn("stop the task on the node", "node", r.agent.node, "err", err)
	}
}

// renew extends the lease; it reports false when the attempt is gone.
func (b *Backend) renew(ctx context.Context, r *run) bool {
	expires, err := b.lease.Renew(ctx, r.Attempt)
	switch {
	case rpcerr.AttemptGone(err):
		b.runLog(r).Info("lease lost", "err", err)
		return false
	case err != nil:
		b.runLog(r).Warn("lease renewal failed", "err", err)
	default:
		if !expires.IsZero() {
			r.leaseExpires = expires
		}
	}
	return true
}

// finish reports the outcome and forgets the attempt's record once the
// server has answered for good; it reports whether it did.
func (b *Backend) finish(ctx context.Context, r *run, o outcome, stdout, stderr string, obj *taskv1.ResultObject) bool {
	if !b.complete(ctx, r, o, stdout, stderr, obj) {
		return false
	}
	b.store.remove(r.AttemptID)
	return true
}

// complete reports the attempt's outcome, retrying while the server is
// unreachable. It reports whether the server answered for good: it took
// the outcome, or refused it (the attempt is no longer this backend's).
func (b *Backend) complete(ctx context.Context, r *run, o outcome, stdout, stderr string, obj *taskv1.ResultObject) bool {
	return b.lease.Complete(ctx, &taskv1.CompleteTaskRequest{
		TaskId: r.TaskID, AttemptId: r.AttemptID, ExitCode: int32(o.exitCode),
		Stdout: textcut.Bytes(stdout, inlineLimit), Stderr: textcut.Bytes(stderr, inlineLimit), Error: textcut.Bytes(o.err, 4096),
		ResultObject: obj, EndedAt: timestamppb.Now(), PreemptedBy: o.preemptedBy, Cancelled: o.cancelled,
	}, b.runLog(r))
}
