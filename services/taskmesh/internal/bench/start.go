package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// startFigures are one submit → start run's figures.
type startFigures struct {
	p50, p99 time.Duration
	// achieved is the submission rate reached: submissions answered over
	// the time from the first one sent to the last one answered.
	achieved float64
}

// startAndRecovery measures submit → start latency, then crash recovery,
// on one scheduler with production timing (Timing's zero value).
func startAndRecovery(ctx context.Context, env *env, o TasksOptions, run int) (startFigures, time.Duration, error) {
	s, err := startScheduler(ctx, env, latencyDatabase(run), scheduler.Timing{})
	if err != nil {
		return startFigures{}, 0, err
	}
	defer s.stop()
	f, err := submitToStart(ctx, s, o)
	if err != nil {
		return f, 0, err
	}
	rec, err := recovery(ctx, s)
	return f, rec, err
}

// startAgents is how many agents long-poll for the submitted tasks.
const startAgents = 4

// submitToStart submits o.StartRate tasks/s for o.StartFor from an open-loop
// generator: each submission leaves at its scheduled time whether or not
// earlier ones were answered, so a slow server meets the load it would
// meet in production instead of slowing the generator down. Long-polling
// agents start (and then complete) each task as soon as their claim
// returns it, each task on its own goroutine as an executor does. The
// latency is the server's started_at − created_at. A submission, claim,
// start or completion that fails, or a task not started within a minute
// of the last submission, fails the run: leaving them out would leave out
// exactly the slow cases.
func submitToStart(ctx context.Context, s *schedulerUnderTest, o TasksOptions) (startFigures, error) {
	tr := newStartTracker("")
	actx, cancel := context.WithCancel(ctx)
	var agents sync.WaitGroup
	for a := range startAgents {
		agents.Add(1)
		go func() { defer agents.Done(); tr.agent(actx, s, fmt.Sprintf("latency-agent-%d", a)) }()
	}
	defer func() { cancel(); agents.Wait() }()
	total := max(1, int(float64(o.StartRate)*o.StartFor.Seconds()))
	achieved := tr.generate(ctx, s, total, o.StartRate)
	deadline := time.Now().Add(time.Minute)
	for !tr.settled() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return startFigures{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.failures > 0 {
		return startFigures{}, fmt.Errorf("submit → start: %d failed calls (first: %v)", tr.failures, tr.firstErr)
	}
	if notStarted := len(tr.submitted) - len(tr.started); len(tr.submitted) < total || notStarted > 0 {
		return startFigures{}, fmt.Errorf("submit → start: %d of %d submissions answered, %d of them not started within a minute",
			len(tr.submitted), total, notStarted)
	}
	ids := make([]string, 0, len(tr.started))
	for id := range tr.started {
		ids = append(ids, id)
	}
	steps, err := startSteps(ctx, s, ids, tr.answered)
	if err != nil {
		return startFigures{}, fmt.Errorf("submit → start steps: %w", err)
	}
	fmt.Fprintln(o.Out, "submit → start steps:", steps)
	return startFigures{p50: percentile(tr.lat, 50), p99: percentile(tr.lat, 99), achieved: achieved}, nil
}

// startSteps splits each task's submit → start at its events' decision
// times (occurred_at; the scheduler and the quota service run in this
// process, on one clock) and at the moment its claim answered the agent:
// submitted → (admitted →) leased: the creation's commit, an admission
// where the task waits in a queue, the claim's wake and decision; leased
// → answered: the claim's commit and answer; answered → started: the
// agent's StartTask up to its decision.
func startSteps(ctx context.Context, s *schedulerUnderTest, ids []string, answered map[string]time.Time) (string, error) {
	rows, err := s.pool.Query(ctx, `SELECT aggregate_id, event_type, min(occurred_at) FROM events
		WHERE aggregate_id = ANY($1) AND event_type IN ('TaskSubmitted', 'TaskAdmitted', 'TaskLeased', 'TaskStarted')
		GROUP BY aggregate_id, event_type`, ids)
	if err != nil {
		return "", err
	}
	at := map[string]map[string]time.Time{}
	var id, typ string
	var occurred time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &typ, &occurred}, func() error {
		if at[id] == nil {
			at[id] = map[string]time.Time{}
		}
		at[id][typ] = occurred
		return nil
	}); err != nil {
		return "", err
	}
	for id, a := range answered {
		if at[id] != nil {
			at[id]["answered"] = a
		}
	}
	return lifecycleSteps(at, ids), nil
}

// lifecycleSteps gives the p50 and p99 of each step between the moments
// at holds for each task (event types, and "answered"), in lifecycle
// order; a task without a moment (no admission when it waits in no
// queue) counts in the step that spans it.
func lifecycleSteps(at map[string]map[string]time.Time, ids []string) string {
	names := []string{"TaskSubmitted", "TaskAdmitted", "TaskLeased", "answered", "TaskStarted"}
	steps := map[string][]time.Duration{}
	var order []string
	for _, id := range ids {
		ev := at[id]
		from := ""
		for _, n := range names {
			if ev[n].IsZero() {
				continue // no admission: the task waits in no queue
			}
			if from != "" {
				step := from + " → " + n
				if steps[step] == nil {
					order = append(order, step)
				}
				steps[step] = append(steps[step], ev[n].Sub(ev[from]))
			}
			from = n
		}
	}
	// In the order of the lifecycle (a step's first task shows it).
	slices.SortStableFunc(order, func(a, b string) int {
		return slices.Index(names, strings.Split(a, " → ")[0]) - slices.Index(names, strings.Split(b, " → ")[0])
	})
	parts := make([]string, len(order))
	for i, step := range order {
		st := steps[step]
		parts[i] = fmt.Sprintf("%s p50 %s p99 %s", step, ms(percentile(st, 50)), ms(percentile(st, 99)))
	}
	return strings.Join(parts, "; ")
}

// startTracker records the submissions, the starts, the completions and
// every failure.
type startTracker struct {
	mu        sync.Mutex
	submitted map[string]bool
	started   map[string]bool
	// answered is when each task's claim answered its agent.
	answered  map[string]time.Time
	completed int
	lat       []time.Duration
	failures  int
	firstErr  error
	// claims are the claims that leased something, each from the later
	// of its sending and its newest task's creation (the moment it could
	// first have had that task) to its answer.
	claims []time.Duration
	// tenant submits the tasks ("bench" when empty).
	tenant string
}

func newStartTracker(tenant string) *startTracker {
	return &startTracker{submitted: map[string]bool{}, started: map[string]bool{}, answered: map[string]time.Time{}, tenant: tenant}
}

func (t *startTracker) fail(what string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures++
	if t.firstErr == nil {
		t.firstErr = fmt.Errorf("%s: %w", what, err)
	}
}

// settled reports whether every answered submission started, or a call
// failed.
func (t *startTracker) settled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures > 0 || len(t.started) >= len(t.submitted)
}

// done reports whether every answered submission completed, or a call
// failed. Agents stopped before it would cancel completions in flight and
// leave their tasks running.
func (t *startTracker) done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures > 0 || t.completed >= len(t.submitted)
}

// generate sends total submissions at rate and returns the rate achieved
// once every one is answered.
func (t *startTracker) generate(ctx context.Context, s *schedulerUnderTest, total, rate int) float64 {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lastAnswer time.Time
	for i := range total {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.tasks.CreateTask(asTenant(ctx, t.tenant), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "latency", Command: "true"}})
			if err != nil {
				t.fail("submit", err)
				return
			}
			now := time.Now()
			mu.Lock()
			if now.After(lastAnswer) {
				lastAnswer = now
			}
			mu.Unlock()
			t.mu.Lock()
			t.submitted[resp.GetTask().GetId()] = true
			t.mu.Unlock()
		}()
	}
	wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.submitted) == 0 {
		return 0
	}
	return float64(len(t.submitted)) / lastAnswer.Sub(start).Seconds()
}

// agent claims with a long poll until ctx ends and starts every task it
// gets on a goroutine of its own.
func (t *startTracker) agent(ctx context.Context, s *schedulerUnderTest, id string) {
	ac := asAgent(ctx, id)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		sent := time.Now()
		resp, err := s.leases.ClaimTasks(ac, &taskv1.ClaimTasksRequest{AgentId: id, MachineId: id, Limit: 50,
			Wait: durationpb.New(5 * time.Second)})
		if err != nil {
			if ctx.Err() == nil {
				t.fail("claim", err)
			}
			return
		}
		if len(resp.GetTasks()) > 0 {
			from := sent
			for _, task := range resp.GetTasks() {
				if c := task.GetCreatedAt().AsTime(); c.After(from) {
					from = c
				}
			}
			now := time.Now()
			t.mu.Lock()
			t.claims = append(t.claims, now.Sub(from))
			for _, task := range resp.GetTasks() {
				t.answered[task.GetId()] = now
			}
			t.mu.Unlock()
		}
		for _, task := range resp.GetTasks() {
			wg.Add(1)
			go func() { defer wg.Done(); t.start(ctx, s, id, task) }()
		}
	}
}

// start starts and completes one claimed task.
func (t *startTracker) start(ctx context.Context, s *schedulerUnderTest, id string, task *taskv1.Task) {
	ac := asAgent(ctx, id)
	st, err := s.leases.StartTask(ac, &taskv1.StartTaskRequest{TaskId: task.GetId(), AgentId: id, AttemptId: task.GetAttemptId()})
	if err != nil {
		if ctx.Err() == nil {
			t.fail("start", err)
		}
		return
	}
	t.mu.Lock()
	t.started[task.GetId()] = true
	t.lat = append(t.lat, st.GetStartedAt().AsTime().Sub(task.GetCreatedAt().AsTime()))
	t.mu.Unlock()
	_, err = s.leases.CompleteTask(ac, &taskv1.CompleteTaskRequest{TaskId: task.GetId(), AgentId: id, AttemptId: task.GetAttemptId()})
	switch {
	case err == nil:
		t.mu.Lock()
		t.completed++
		t.mu.Unlock()
	case ctx.Err() == nil:
		t.fail("complete", err)
	}
}
