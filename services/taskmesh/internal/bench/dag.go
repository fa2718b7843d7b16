package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// DAGOptions configures the task-group benchmark.
type DAGOptions struct {
	Common
	Nodes      int // DAG size: one root, Nodes-2 children in parallel, one merge
	Agents     int // concurrent agents
	ClaimBatch int // tasks per claim
	InFlight   int // completions in flight per agent
	// RepeatRuns and RepeatParallel shape the repeat measured beside it.
	RepeatRuns, RepeatParallel int
}

func (o *DAGOptions) defaults() {
	o.Common.defaults()
	if o.Nodes < 3 {
		o.Nodes = 1000
	}
	if o.Agents <= 0 {
		o.Agents = 8
	}
	if o.ClaimBatch <= 0 {
		o.ClaimBatch = 32
	}
	if o.InFlight <= 0 {
		o.InFlight = 16
	}
	if o.RepeatRuns <= 0 {
		o.RepeatRuns = 10_000
	}
	if o.RepeatParallel <= 0 {
		o.RepeatParallel = 100
	}
}

// DAGResult holds the medians of the runs.
type DAGResult struct {
	// Total is CreateTaskGroup to the group completed (every member
	// claimed, completed, and the group's end recorded).
	Total time.Duration
	// ClaimableP50 and ClaimableP99 are, over every dependency edge, from
	// the (last) parent's TaskSucceeded to the child claimable: the
	// latest commit among the parents' completions and the child's own
	// submission and admission (the server keeps commit times,
	// track_commit_timestamp), as the pipeline benchmark measures a stage
	// hand-off. This is the target's figure.
	ClaimableP50, ClaimableP99 time.Duration
	// Edges is how many dependency edges there are (the DAG's children
	// and the merge's last parent).
	Edges int
	// HandoffP50 and HandoffP99 are what a waiting agent sees: from the
	// (last) parent's TaskSucceeded to the child in the agent's hands
	// (its long-polling claim answered), over the Measured edges whose
	// child an agent was already waiting for (see handoffs).
	HandoffP50, HandoffP99 time.Duration
	Measured               int
	// The agent's hand-off in two steps, p50 and p99 over the measured
	// edges: Wake is the parent's TaskSucceeded to the child's
	// TaskLeased (the parent's commit, the waiting claim woken and
	// deciding); Lease is TaskLeased to the claim answered (the claim's
	// transaction, queued with other claims, committed, and the answer
	// back).
	WakeP50, WakeP99, LeaseP50, LeaseP99 time.Duration
	// Repeat is the repeat's CreateTaskGroup to completed.
	Repeat time.Duration
}

// DAG targets.
const (
	dagTarget     = 2 * time.Second
	handoffTarget = 50 * time.Millisecond
)

// DAG measures task groups end to end through the scheduler's gRPC API,
// each figure once per run: a Nodes-node DAG of no-op tasks (one root,
// Nodes-2 children in parallel, one merge) drained by Agents agents —
// total time and the hand-off from each parent's completion to its child
// claimable and to its child in a waiting agent's hands — and a repeat of RepeatRuns no-op runs, RepeatParallel at once.
func DAG(ctx context.Context, o DAGOptions) (*DAGResult, error) {
	o.defaults()
	// Commit times tell when a child became claimable.
	env, err := startEnv(ctx, o.Common, "dag", map[string]string{"track_commit_timestamp": "on"})
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "task groups: Postgres %s (durable defaults), embedded Kafka %s; %d-node DAG and a %d-run repeat (parallel %d), %d agents\n",
		env.server.URL(""), env.broker.Addrs()[0], o.Nodes, o.RepeatRuns, o.RepeatParallel, o.Agents)
	var total, c50, c99, p50, p99, repeat []time.Duration
	for run := 1; run <= o.Runs; run++ {
		r, err := dagOnce(ctx, env, o, run)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		fmt.Fprintf(o.Out, "run %d: dag %s; parent completed → child claimable p50 %s p99 %s over %d edges; "+
			"→ a waiting agent has it p50 %s p99 %s over the %d edges with an agent waiting (succeeded → leased p50 %s p99 %s, "+
			"leased → claim answered p50 %s p99 %s); repeat %s\n", run,
			ms(r.Total), ms(r.ClaimableP50), ms(r.ClaimableP99), r.Edges, ms(r.HandoffP50), ms(r.HandoffP99), r.Measured,
			ms(r.WakeP50), ms(r.WakeP99), ms(r.LeaseP50), ms(r.LeaseP99), ms(r.Repeat))
		total, repeat = append(total, r.Total), append(repeat, r.Repeat)
		c50, c99 = append(c50, r.ClaimableP50), append(c99, r.ClaimableP99)
		p50, p99 = append(p50, r.HandoffP50), append(p99, r.HandoffP99)
	}
	res := &DAGResult{Total: time.Duration(durations(total).median()), Repeat: time.Duration(durations(repeat).median()),
		ClaimableP50: time.Duration(durations(c50).median()), ClaimableP99: time.Duration(durations(c99).median()),
		HandoffP50: time.Duration(durations(p50).median()), HandoffP99: time.Duration(durations(p99).median())}
	perRun := func(d time.Duration) string { return fmt.Sprintf("%.0f runs/s", float64(o.RepeatRuns)/d.Seconds()) }
	summary(o.Out, o.Runs, [][]string{
		{fmt.Sprintf("dag of %d no-op tasks, create → completed", o.Nodes), durations(total).format(millis), "< " + ms(dagTarget), verdict(res.Total < dagTarget)},
		{"parent completed → child claimable, p50", durations(c50).format(millis), "", ""},
		{"parent completed → child claimable, p99", durations(c99).format(millis), "< " + ms(handoffTarget), verdict(res.ClaimableP99 < handoffTarget)},
		{"parent completed → waiting agent has the child, p50", durations(p50).format(millis), "", ""},
		{"parent completed → waiting agent has the child, p99", durations(p99).format(millis), "", ""},
		{fmt.Sprintf("repeat of %d runs (parallel %d), create → completed", o.RepeatRuns, o.RepeatParallel), durations(repeat).format(millis),
			perRun(res.Repeat), ""},
	})
	return res, nil
}

func dagOnce(ctx context.Context, env *env, o DAGOptions, run int) (DAGResult, error) {
	s, err := startScheduler(ctx, env, fmt.Sprintf("dag%d", run), scheduler.Timing{AgentLostAfter: time.Hour})
	if err != nil {
		return DAGResult{}, err
	}
	defer s.stop()
	groups := taskv1.NewTaskGroupServiceClient(s.conn)
	if o.PGStats {
		if err := pgstats.Reset(ctx, s.pool); err != nil {
			return DAGResult{}, err
		}
	}
	got := &claims{at: map[string]claimTimes{}}
	stopAgents, agentErrs := drainAgents(ctx, s, o, got)
	defer stopAgents()

	tasks := []*taskv1.TaskGroupTask{{Id: "root", Name: "root", Type: "noop"}}
	var mids []string
	for i := range o.Nodes - 2 {
		id := fmt.Sprint("n", i)
		mids = append(mids, id)
		tasks = append(tasks, &taskv1.TaskGroupTask{Id: id, Name: id, Type: "noop", DependsOn: []string{"root"}})
	}
	tasks = append(tasks, &taskv1.TaskGroupTask{Id: "merge", Name: "merge", Type: "noop", DependsOn: mids})
	var r DAGResult
	began := time.Now()
	id, err := runGroup(ctx, groups, &taskv1.CreateTaskGroupRequest{Name: "bench-dag", Mode: "dag", Tasks: tasks}, agentErrs)
	if err != nil {
		return r, fmt.Errorf("dag: %w", err)
	}
	r.Total = time.Since(began)
	if err = handoffs(ctx, s, id, got, &r); err != nil {
		return r, err
	}
	if o.PGStats {
		if err := pgstats.Print(ctx, s.pool, o.Out); err != nil {
			return r, err
		}
	}
	began = time.Now()
	if _, err := runGroup(ctx, groups, &taskv1.CreateTaskGroupRequest{Name: "bench-repeat", Repeat: &taskv1.RepeatPolicy{
		Count: int32(o.RepeatRuns), Parallel: ptr32(int32(o.RepeatParallel)), Template: &taskv1.TaskSpec{Name: "run", Type: "noop"}}}, agentErrs); err != nil {
		return r, fmt.Errorf("repeat: %w", err)
	}
	r.Repeat = time.Since(began)
	return r, nil
}

// runGroup creates a group and follows it (WatchTaskGroup) until it
// completed; an agent's failure ends it early.
func runGroup(ctx context.Context, groups taskv1.TaskGroupServiceClient, req *taskv1.CreateTaskGroupRequest, agentErrs <-chan error) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req.Start = proto.Bool(true)
	created, err := groups.CreateTaskGroup(asUser(wctx), req)
	if err != nil {
		return "", err
	}
	id := created.GetGroup().GetId()
	watch, err := groups.WatchTaskGroup(asUser(wctx), &taskv1.WatchTaskGroupRequest{Id: id})
	if err != nil {
		return id, err
	}
	ended := make(chan error, 1)
	go func() {
		for {
			m, err := watch.Recv()
			if err != nil {
				ended <- err
				return
			}
			if g := m.GetGroup(); g.GetStatus() == "completed" {
				ended <- nil
				return
			} else if g.GetStatus() == "failed" || g.GetStatus() == "cancelled" {
				ended <- fmt.Errorf("group %s ended %s: %s", id, g.GetStatus(), g.GetError())
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("the watch of %s ended before the group completed", id)
		}
		return id, err
	case err := <-agentErrs:
		return id, err
	}
}

// claims records, for each task, the claim that got it: when the agent
// asked and when the answer came, on this process's clock — the
// scheduler's too.
type claims struct {
	mu sync.Mutex
	at map[string]claimTimes
}

type claimTimes struct{ asked, got time.Time }

func (c *claims) add(id string, t claimTimes) {
	c.mu.Lock()
	c.at[id] = t
	c.mu.Unlock()
}

// drainAgents runs o.Agents no-op agents: long-polling claims of up to
// ClaimBatch tasks, completed InFlight at a time as an executor does.
// stop ends them.
func drainAgents(ctx context.Context, s *schedulerUnderTest, o DAGOptions, got *claims) (stop func(), errs <-chan error) {
	actx, cancel := context.WithCancel(ctx)
	out := make(chan error, o.Agents)
	var wg sync.WaitGroup
	for a := range o.Agents {
		id := fmt.Sprintf("dag-agent-%d", a)
		wg.Go(func() {
			ctx := asAgent(actx, id)
			sem := make(chan struct{}, o.InFlight)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for actx.Err() == nil {
				asked := time.Now()
				resp, err := s.leases.ClaimTasks(ctx, &taskv1.ClaimTasksRequest{AgentId: id, MachineId: id, Limit: int32(o.ClaimBatch),
					Types: []string{"noop"}, Wait: durationpb.New(time.Second)})
				if err != nil {
					if actx.Err() == nil {
						out <- fmt.Errorf("claim: %w", err)
					}
					return
				}
				ct := claimTimes{asked: asked, got: time.Now()}
				for _, t := range resp.GetTasks() {
					got.add(t.GetId(), ct)
				}
				for _, t := range resp.GetTasks() {
					sem <- struct{}{}
					inflight.Go(func() {
						defer func() { <-sem }()
						if _, err := s.leases.CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: t.GetId(), AgentId: id,
							AttemptId: t.GetAttemptId()}); err != nil && actx.Err() == nil {
							select {
							case out <- fmt.Errorf("complete: %w", err):
							default:
							}
						}
					})
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }, out
}

// handoffs measures every dependency edge of group id from the event
// log, which holds each event's decision time (occurred_at; the
// scheduler runs in this process, on the same clock) and, through its
// transaction, its commit time:
//
//   - claimable: from the (last) parent's TaskSucceeded to the child
//     claimable, the latest commit among the parents' TaskSucceeded and
//     the child's TaskSubmitted and TaskAdmitted. From that commit on, a
//     claim leases the child (the claim reads the parents' states in its
//     own statement). Every edge counts.
//   - what a waiting agent sees: from the same TaskSucceeded to the
//     child in the agent's hands (its long-polling claim answered), split
//     at the child's TaskLeased. Only edges whose child an agent was
//     already waiting for count: a child whose agent asked only later
//     waited for a free agent (998 children, 8 agents), which is the
//     agents' capacity, not the hand-off.
func handoffs(ctx context.Context, s *schedulerUnderTest, id string, got *claims, r *DAGResult) error {
	parents := map[string][]string{}
	rows, err := s.pool.Query(ctx, `SELECT id, depends_on FROM tasks WHERE group_id = $1`, id)
	if err != nil {
		return err
	}
	var member string
	var deps []string
	if _, err := pgx.ForEachRow(rows, []any{&member, &deps}, func() error { parents[member] = deps; return nil }); err != nil {
		return err
	}
	ids := make([]string, 0, len(parents))
	for m := range parents {
		ids = append(ids, m)
	}
	type times struct{ succeeded, succeededCommit, ownCommit, leased time.Time }
	at := map[string]*times{}
	// xmin is the transaction that wrote the event.
	rows, err = s.pool.Query(ctx, `SELECT aggregate_id, event_type, occurred_at, pg_xact_commit_timestamp(xmin) FROM events
		WHERE aggregate_id = ANY($1) AND event_type IN ('TaskSubmitted', 'TaskAdmitted', 'TaskLeased', 'TaskSucceeded')`, ids)
	if err != nil {
		return err
	}
	var typ string
	var occurred time.Time
	var committed *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&member, &typ, &occurred, &committed}, func() error {
		if committed == nil {
			return errors.New("the server kept no commit time of an event (track_commit_timestamp is off)")
		}
		t := at[member]
		if t == nil {
			t = &times{}
			at[member] = t
		}
		switch typ {
		case "TaskSucceeded":
			t.succeeded, t.succeededCommit = occurred, *committed
		case "TaskLeased":
			if t.leased.IsZero() || occurred.Before(t.leased) {
				t.leased = occurred
			}
		default:
			t.ownCommit = maxTime(t.ownCommit, *committed)
		}
		return nil
	}); err != nil {
		return err
	}
	var claimable, total, wake, lease []time.Duration
	got.mu.Lock()
	defer got.mu.Unlock()
	for child, ps := range parents {
		if len(ps) == 0 {
			continue
		}
		c := at[child]
		if c == nil || c.leased.IsZero() {
			return fmt.Errorf("task %s was never leased", child)
		}
		var parentDone, parentCommit time.Time
		for _, p := range ps {
			pt := at[p]
			if pt == nil || pt.succeeded.IsZero() {
				return fmt.Errorf("task %s ran before its parent %s succeeded", child, p)
			}
			parentDone, parentCommit = maxTime(parentDone, pt.succeeded), maxTime(parentCommit, pt.succeededCommit)
		}
		r.Edges++
		claimable = append(claimable, maxTime(parentCommit, c.ownCommit).Sub(parentDone))
		a, ok := got.at[child]
		if !ok {
			return fmt.Errorf("task %s was never claimed", child)
		}
		if a.asked.Before(parentDone) {
			total = append(total, a.got.Sub(parentDone))
			wake, lease = append(wake, c.leased.Sub(parentDone)), append(lease, a.got.Sub(c.leased))
		}
	}
	if len(claimable) == 0 {
		return errors.New("the group has no dependency edge")
	}
	if len(total) == 0 {
		return errors.New("no dependency edge had an agent waiting for its child")
	}
	r.ClaimableP50, r.ClaimableP99 = percentile(claimable, 50), percentile(claimable, 99)
	r.Measured = len(total)
	r.HandoffP50, r.HandoffP99 = percentile(total, 50), percentile(total, 99)
	r.WakeP50, r.WakeP99 = percentile(wake, 50), percentile(wake, 99)
	r.LeaseP50, r.LeaseP99 = percentile(lease, 50), percentile(lease, 99)
	return nil
}
