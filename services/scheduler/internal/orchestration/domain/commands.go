package domain

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Decision is what a group command decided: the group's events (already
// folded into the state the command returns) and what they mean for the
// member tasks, to be stored in the same transaction: tasks to create
// (their TaskSubmitted records), tasks to cancel (with the reason each
// gets), tasks to delete and tasks to retry. A store cancels, deletes or
// retries a task by the task aggregate's own rules; a task to cancel that
// is final already stays as it is, a task to retry that is not failed or
// cancelled (or is gone) fails the whole decision.
type Decision struct {
	Records     []Record
	NewTasks    [][]task.Record
	CancelTasks map[string]string
	DeleteTasks []string
	RetryTasks  []string
}

// Empty reports whether nothing was decided.
func (d Decision) Empty() bool {
	return len(d.Records) == 0 && len(d.NewTasks) == 0 && len(d.CancelTasks) == 0 && len(d.DeleteTasks) == 0 &&
		len(d.RetryTasks) == 0
}

// decider records events on a working copy of a state.
type decider struct {
	s     State
	d     Decision
	now   time.Time
	actor string
	newID func() string
}

func (x *decider) record(e Event) {
	r := Record{Event: e, At: x.now, Actor: x.actor}
	x.s.Apply(r)
	x.d.Records = append(x.d.Records, r)
}

func (x *decider) cancel(taskID, reason string) {
	if x.d.CancelTasks == nil {
		x.d.CancelTasks = map[string]string{}
	}
	x.d.CancelTasks[taskID] = reason
}

// Create records a new group from a valid definition and, with start,
// starts it (its first members are released at once). newID makes task
// ids.
func Create(now time.Time, id, tenant, actor, requestID string, def Definition, start bool, newID func() string) (State, Decision) {
	x := &decider{s: State{Members: map[string]Member{}}, now: now, actor: actor, newID: newID}
	x.record(Created{ID: id, TenantID: tenant, CreatedBy: actor, RequestID: requestID, Def: def.withTaskIDs(newID)})
	if start {
		x.start()
	}
	return x.s, x.d
}

func immutable(g Group, what string) error {
	return fmt.Errorf("%w: cannot %s a %s group", task.ErrImmutable, what, g.Status)
}

// Start starts a pending group. Starting is idempotent: a group that has
// started already (as a group does at creation unless it is created with
// start false), whatever became of it since, is left as it is and the
// decision is empty. A group cancelled before it started cannot start.
func (s State) Start(now time.Time, actor string, newID func() string) (State, Decision, error) {
	if s.Group.Status != StatusPending {
		if !s.Group.StartedAt.IsZero() {
			return s, Decision{}, nil
		}
		return s, Decision{}, immutable(s.Group, "start")
	}
	x := &decider{s: s.Clone(), now: now, actor: actor, newID: newID}
	x.start()
	return x.s, x.d, nil
}

func (x *decider) start() {
	x.record(Started{})
	x.releaseNext()
}

// Cancel cancels a group that is not final: members never released will
// not run, and the open members' tasks are cancelled (a running one is
// stopped: SIGTERM, grace, SIGKILL).
//
// The group first catches up with its members' tasks as they are now
// (facts, as for Advance), so a cancel that comes after the last member
// ended but before the process manager saw it does not cancel a group
// whose work is done: the group ends by its members' outcome instead, and
// Cancel refuses as it does for a final group, returning that catch-up's
// decision beside the error for the caller to store
// (docs/api/task-groups.md#group-lifecycle).
func (s State) Cancel(now time.Time, facts map[string]Facts, actor, reason string) (State, Decision, error) {
	if s.Group.Status.Final() {
		return s, Decision{}, immutable(s.Group, "cancel")
	}
	x := &decider{s: s.Clone(), now: now, actor: ProcessManager}
	x.catchUp(facts)
	if x.s.Group.Status.Final() {
		return x.s, x.d, immutable(x.s.Group, "cancel")
	}
	x.actor = actor
	why := fmt.Sprintf("group %s cancelled", s.Group.ID)
	if reason != "" {
		why += ": " + reason
	}
	// The members' tasks are cancelled in the same transaction, so the
	// group records them cancelled with it rather than on its next catch-up:
	// the answer, and every read after it, shows the group as it is
	// (docs/api/task-groups.md). A task that ended meanwhile makes the
	// store decide again on fresh facts, so none is recorded cancelled that
	// ended otherwise.
	var stopped []Change
	for _, m := range x.s.Members {
		if m.Released() && !m.Status.Final() {
			x.cancel(m.TaskID, why)
			stopped = append(stopped, Change{Key: m.Key, TaskID: m.TaskID, From: m.Status, To: task.StatusCancelled,
				StartedAt: m.StartedAt, EndedAt: now, Error: "cancelled: " + why})
		}
	}
	if len(stopped) > 0 {
		slices.SortFunc(stopped, func(a, b Change) int {
			return cmp.Compare(x.s.Members[a.Key].Index, x.s.Members[b.Key].Index)
		})
		x.record(Changed{Members: stopped})
	}
	x.record(Canceled{Reason: reason})
	return x.s, x.d, nil
}

// ErrNotMember: the task is not a member of the group. A task may carry a
// task group's id as its group_id without being one of its members (a
// client gives its tasks the group_id it likes).
var ErrNotMember = errors.New("the task is not a member of the group")

// RetryMember puts a member's failed or cancelled task back to pending
// (the task's own RetryScheduled, as RetryTask records for any task) and
// has the group follow the member again: it is pending once more
// (TaskGroupMembersChanged), and the counts, the failed members and the
// group's end follow it from there as they follow every member. In a dag
// the member's descendants that were cancelled because it failed or was
// cancelled come back with it: each cancelled no earlier than the
// retried dependency ended, and whose other dependencies have completed,
// are still open or come back too (docs/api/task-groups.md#retrying-a-member).
//
// The group catches up with its members first, as Cancel does. Refused,
// with that catch-up's decision beside the error: a group that has ended
// (its members are not run again), a repeat (it tries its failed runs
// again itself), a member whose task is not failed or cancelled, and a
// dag member that depends on a member that failed or was cancelled (its
// dependency is the one to retry; it comes back with it). A task that
// is not the task of any member is ErrNotMember. s must hold every
// member (Scope All) and facts the tasks of the released ones.
func (s State) RetryMember(now time.Time, facts map[string]Facts, actor, taskID string) (State, Decision, error) {
	key := ""
	for k, m := range s.Members {
		if m.TaskID == taskID && taskID != "" {
			key = k
		}
	}
	if key == "" {
		return s, Decision{}, ErrNotMember
	}
	x := &decider{s: s.Clone(), now: now, actor: ProcessManager}
	x.catchUp(facts)
	g := x.s.Group
	m := x.s.Members[key]
	switch {
	case g.Status != StatusRunning:
		return x.s, x.d, fmt.Errorf("%w: the task's group %s has ended (%s); its members are not run again", task.ErrImmutable, g.ID, g.Status)
	case g.Mode == ModeRepeat:
		return x.s, x.d, fmt.Errorf("%w: the task is a run of repeat %s, which tries its failed runs again itself (backoff_sec)", task.ErrImmutable, g.ID)
	}
	if f, ok := facts[taskID]; !ok || f.Gone {
		return x.s, x.d, task.ErrNotFound
	} else if f.Status != task.StatusFailed && f.Status != task.StatusCancelled {
		return x.s, x.d, fmt.Errorf("%w: cannot retry a %s task", task.ErrImmutable, f.Status)
	}
	for _, d := range m.DependsOn {
		p := x.s.Members[d]
		if _, doomed := x.d.CancelTasks[p.TaskID]; doomed || p.Status == task.StatusFailed || p.Status == task.StatusCancelled {
			to := p.Status
			if doomed {
				to = task.StatusCancelled
			}
			return x.s, x.d, fmt.Errorf("%w: the task depends on member %s of group %s, which %s; retry %s, and the dependents its end cancelled come back with it",
				task.ErrImmutable, d, g.ID, pastTense(to), d)
		}
	}
	var changes []Change
	for _, k := range x.comeBack(key, facts) {
		b := x.s.Members[k]
		if _, doomed := x.d.CancelTasks[b.TaskID]; doomed {
			// The catch-up was about to cancel it for the member that
			// comes back now: it goes on waiting for it instead.
			delete(x.d.CancelTasks, b.TaskID)
			continue
		}
		changes = append(changes, Change{Key: k, TaskID: b.TaskID, From: b.Status, To: task.StatusPending})
		x.d.RetryTasks = append(x.d.RetryTasks, b.TaskID)
	}
	x.actor = actor
	x.record(Changed{Members: changes})
	return x.s, x.d, nil
}

// comeBack returns, in group order, the member key and, in a dag, its
// descendants that come back with it: a descendant cancelled (or about to
// be, by this decision) no earlier than a dependency that comes back
// ended, whose every other dependency has completed, is open and stays
// so, or comes back too. A descendant cancelled before its dependency
// ended was cancelled by hand, and stays so.
func (x *decider) comeBack(key string, facts map[string]Facts) []string {
	back := map[string]bool{key: true}
	if x.s.Group.Mode == ModeDAG {
		doomed := func(m Member) bool { _, ok := x.d.CancelTasks[m.TaskID]; return ok && m.Released() }
		for grew := true; grew; {
			grew = false
			for _, d := range x.s.Ordered() {
				if back[d.Key] || len(d.DependsOn) == 0 {
					continue
				}
				f, ok := facts[d.TaskID]
				cancelled := d.Status == task.StatusCancelled && ok && !f.Gone && f.Status == task.StatusCancelled
				if !cancelled && !doomed(d) {
					continue
				}
				caused, free := false, true
				for _, k := range d.DependsOn {
					p := x.s.Members[k]
					switch {
					case back[k]:
						caused = caused || doomed(d) || !d.EndedAt.Before(p.EndedAt)
					case doomed(p), p.Status.Final() && p.Status != task.StatusCompleted:
						free = false
					}
				}
				if caused && free {
					back[d.Key], grew = true, true
				}
			}
		}
	}
	var out []string
	for _, m := range x.s.Ordered() {
		if back[m.Key] {
			out = append(out, m.Key)
		}
	}
	return out
}

// Delete removes a group that is final or was never started, with its
// members' tasks. s must hold every member (Scope All).
func (s State) Delete(now time.Time, actor string) (State, Decision, error) {
	if s.Group.Status == StatusRunning {
		return s, Decision{}, fmt.Errorf("%w: cancel the running group before deleting it", task.ErrImmutable)
	}
	x := &decider{s: s.Clone(), now: now, actor: actor}
	for _, m := range s.Ordered() {
		if m.Released() {
			x.d.DeleteTasks = append(x.d.DeleteTasks, m.TaskID)
		}
	}
	x.record(Deleted{})
	return x.s, x.d, nil
}

// ResetRepeat closes an open breaker of a running repeat; runs resume at
// once (within parallel and interval_sec). The operator and the reason are
// recorded.
func (s State) ResetRepeat(now time.Time, operator, reason string, newID func() string) (State, Decision, error) {
	g := s.Group
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return s, Decision{}, invalid("reason", "is required: say why the breaker may close")
	case utf8.RuneCountInString(reason) > 1024:
		return s, Decision{}, invalid("reason", "is longer than 1024 characters")
	case g.Mode != ModeRepeat:
		return s, Decision{}, fmt.Errorf("%w: a %s group has no circuit breaker (only a repeat has)", task.ErrImmutable, g.Mode)
	case g.Status != StatusRunning:
		return s, Decision{}, immutable(g, "reset the breaker of")
	case !g.Repeat.CircuitOpen:
		return s, Decision{}, fmt.Errorf("%w: the circuit breaker is not open", task.ErrImmutable)
	}
	x := &decider{s: s.Clone(), now: now, actor: operator, newID: newID}
	x.record(RepeatReset{Operator: operator, Reason: reason})
	x.releaseNext()
	return x.s, x.d, nil
}

// Advance is one step of the process manager: it records how the open
// members' tasks changed (facts by task id; a task missing from facts is
// gone), then what follows — a failed serial group cancels its other
// members; a failed dag member its descendants; a repeat counts its runs,
// opens its breaker or fails at max_failures; a group whose members are
// all final ends; more members or runs are released. Facts of several
// changes of one task between two looks make one change.
func (s State) Advance(now time.Time, facts map[string]Facts, newID func() string) (State, Decision) {
	x := &decider{s: s.Clone(), now: now, actor: ProcessManager, newID: newID}
	x.catchUp(facts)
	x.releaseNext()
	return x.s, x.d
}

// ProcessManager is the actor of the group's own decisions, those a
// client's command records too when it first catches the group up.
const ProcessManager = "scheduler"

// catchUp is Advance up to the release of more members: record how the
// open members' tasks changed, apply the mode's rule to those that broke,
// and end a group whose members are all final. A command a client sends
// runs it first (Cancel, RetryMember), so that it decides on the group as
// its members are now, not as the process manager last saw them.
func (x *decider) catchUp(facts map[string]Facts) {
	changes := x.changes(facts)
	if len(changes) > 0 {
		x.record(Changed{Members: changes})
	}
	if x.s.Group.Status == StatusRunning {
		x.react(changes)
	}
	if x.s.Group.Status == StatusRunning {
		x.finish()
	}
}

// changes compares the open members with their tasks.
func (x *decider) changes(facts map[string]Facts) []Change {
	var out []Change
	order := map[string]int{}
	for _, m := range x.s.Members {
		if !m.Released() || m.Status.Final() {
			continue
		}
		f, ok := facts[m.TaskID]
		if !ok || f.Gone {
			f = Facts{Status: task.StatusCancelled, EndedAt: x.now, Error: "the member's task was deleted"}
		}
		if f.Status == m.Status && f.StartedAt.Equal(m.StartedAt) {
			continue
		}
		c := Change{Key: m.Key, TaskID: m.TaskID, From: m.Status, To: f.Status, StartedAt: f.StartedAt}
		if f.Status.Final() {
			c.EndedAt, c.Error = f.EndedAt, f.Error
			if c.EndedAt.IsZero() {
				c.EndedAt = x.now
			}
			if f.Status == task.StatusCompleted {
				c.Error = ""
			}
		}
		order[m.Key] = m.Index
		out = append(out, c)
	}
	// In the order the members ended (a repeat counts failures in a row),
	// then in group order.
	slices.SortFunc(out, func(a, b Change) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(order[a.Key], order[b.Key]))
	})
	return out
}

// react applies the mode's rule to members that just failed or were
// cancelled.
func (x *decider) react(changes []Change) {
	var broken []Change
	for _, c := range changes {
		if !c.From.Final() && (c.To == task.StatusFailed || c.To == task.StatusCancelled) {
			broken = append(broken, c)
		}
	}
	g := &x.s.Group
	switch g.Mode {
	case ModeSerial:
		if len(broken) == 0 {
			return
		}
		c := broken[0]
		reason := fmt.Sprintf("task %s %s", c.Key, pastTense(c.To))
		for _, m := range x.s.Members {
			if m.Released() && !m.Status.Final() {
				x.cancel(m.TaskID, fmt.Sprintf("group %s failed: %s", g.ID, reason))
			}
		}
		x.record(Failed{Reason: reason, Members: []string{c.Key}})
	case ModeDAG:
		for key, reason := range x.descendants(broken) {
			x.cancel(x.s.Members[key].TaskID, reason)
		}
	case ModeRepeat:
		r := g.Repeat
		switch {
		// max_failures is the number of failed runs a repeat tolerates: the
		// one after it ends the repeat, as the breaker's threshold is the
		// failure that opens it (docs/decisions/0102-max-failures-are-tolerated.md).
		case r.MaxFailures > 0 && r.Failures > r.MaxFailures:
			for _, m := range x.s.Members {
				if m.Released() && !m.Status.Final() {
					x.cancel(m.TaskID, fmt.Sprintf("repeat %s failed: more than max_failures runs failed", g.ID))
				}
			}
			x.record(Failed{Reason: fmt.Sprintf("%d runs failed, more than max_failures %d", r.Failures, r.MaxFailures)})
		case r.Threshold > 0 && r.ConsecutiveFailures >= r.Threshold && !r.CircuitOpen:
			x.record(CircuitOpened{ConsecutiveFailures: r.ConsecutiveFailures, Failures: r.Failures})
		}
	}
}

func pastTense(s task.Status) string {
	if s == task.StatusCancelled {
		return "was cancelled"
	}
	return "failed"
}

// descendants maps each open member that (transitively) depends on a
// broken member to the reason it will not run. Only open members can be
// descendants of a member that just broke: none of them could start.
func (x *decider) descendants(broken []Change) map[string]string {
	if len(broken) == 0 {
		return nil
	}
	dependents := map[string][]string{}
	for _, m := range x.s.Members {
		for _, d := range m.DependsOn {
			dependents[d] = append(dependents[d], m.Key)
		}
	}
	out := map[string]string{}
	for _, b := range broken {
		reason := fmt.Sprintf("dependency %s %s", b.Key, pastTense(b.To))
		queue := []string{b.Key}
		for len(queue) > 0 {
			k := queue[0]
			queue = queue[1:]
			for _, d := range dependents[k] {
				m, ok := x.s.Members[d]
				if _, seen := out[d]; seen || !ok || m.Status.Final() {
					continue
				}
				out[d] = reason
				queue = append(queue, d)
			}
		}
	}
	for k := range out {
		if !x.s.Members[k].Released() {
			delete(out, k) // never released: nothing to cancel
		}
	}
	return out
}

// finish ends a running group whose members are all final.
func (x *decider) finish() {
	g := &x.s.Group
	if g.Mode == ModeRepeat {
		if g.Repeat.Completed >= g.Repeat.Count {
			x.record(Completed{})
		}
		return
	}
	if g.Open() > 0 {
		return
	}
	if done := g.Counts[task.StatusCompleted]; done == g.Total {
		x.record(Completed{})
	} else {
		x.record(Failed{Reason: fmt.Sprintf("%d of %d tasks did not complete", g.Total-done, g.Total),
			Members: g.FailedMembers})
	}
}

// releaseNext releases what may start now: every member of a serial or
// dag group and of an unlimited parallel group at start; a limited
// parallel group's next members while fewer than max_parallel are open; a
// repeat's due retries and next runs within parallel and interval_sec.
func (x *decider) releaseNext() {
	g := &x.s.Group
	if g.Status != StatusRunning {
		return
	}
	if g.Mode == ModeRepeat {
		x.releaseRuns()
		return
	}
	var waiting []Member
	for _, m := range x.s.Ordered() {
		if !m.Released() && !m.Status.Final() {
			waiting = append(waiting, m)
		}
	}
	if len(waiting) == 0 {
		return
	}
	if g.MaxParallel > 0 {
		slots := g.MaxParallel - (g.Open() - len(waiting))
		waiting = waiting[:max(0, min(slots, len(waiting)))]
	}
	if len(waiting) == 0 {
		return
	}
	// Every task id first: a dag member's dependencies are released with
	// it (or were before) and its task depends on theirs.
	ids := make(map[string]string, len(x.s.Members))
	for k, m := range x.s.Members {
		ids[k] = m.TaskID
	}
	rel := make([]Release, len(waiting))
	for i, m := range waiting {
		taskID := m.PlannedTaskID
		if taskID == "" {
			taskID = x.newID()
		}
		rel[i] = Release{Key: m.Key, TaskID: taskID}
		ids[m.Key] = taskID
	}
	for i, m := range waiting {
		spec := m.Spec
		spec.DependsOn = nil
		for _, d := range m.DependsOn {
			if id := ids[d]; id != "" {
				spec.DependsOn = append(spec.DependsOn, id)
			}
		}
		x.submit(rel[i].TaskID, spec, m.ClusterQueue)
	}
	x.record(Released{Members: rel})
}

func (x *decider) submit(taskID string, spec task.Spec, clusterQueue string) {
	g := x.s.Group
	spec.GroupID = g.ID
	x.d.NewTasks = append(x.d.NewTasks, task.Submit(x.now, taskID, g.TenantID, g.CreatedBy, "", "", spec, clusterQueue))
}

// releaseRuns starts a repeat's runs: due retries first (the oldest
// failures), then new runs, while fewer than parallel are open, the
// breaker is closed, no failed run is still backing off (a failure pauses
// the repeat for backoff_sec, then that run is tried again), and — with
// interval_sec — the last run has started at least interval_sec ago and
// every released run has started (so starts are interval_sec apart
// however long an agent takes to start one).
func (x *decider) releaseRuns() {
	g := &x.s.Group
	r := g.Repeat
	var rel []Release
	fresh := 0 // new runs among rel
	retries := slices.Clone(r.Retries)
	open, unstarted := g.Open(), g.unstarted()
	for !r.CircuitOpen && open < r.Parallel {
		if r.IntervalSec > 0 && (unstarted > 0 || x.now.Before(r.spacedFrom())) {
			break
		}
		run, attempt := 0, 0
		if i := dueRetry(retries, x.now); i >= 0 {
			run, attempt = retries[i].Run, retries[i].Attempt
			retries = slices.Delete(retries, i, i+1)
		} else if len(retries) > 0 {
			break // backing off: nothing new starts before the failed run is tried again
		} else if r.Released+fresh < r.Count {
			fresh++
			run, attempt = r.Released+fresh, 1
		} else {
			break
		}
		key := fmt.Sprintf("run-%d", run)
		if attempt > 1 {
			key = fmt.Sprintf("run-%d-retry-%d", run, attempt-1)
		}
		rel = append(rel, Release{Key: key, TaskID: x.newID(), Run: run, Attempt: attempt})
		open++
		unstarted++
	}
	if len(rel) == 0 {
		return
	}
	for _, rl := range rel {
		x.submit(rl.TaskID, r.Spec, r.ClusterQueue)
	}
	x.record(Released{Members: rel})
}

// dueRetry is the index of the retry due first at now, or -1.
func dueRetry(retries []Retry, now time.Time) int {
	best := -1
	for i, rt := range retries {
		if !rt.DueAt.After(now) && (best < 0 || rt.DueAt.Before(retries[best].DueAt)) {
			best = i
		}
	}
	return best
}
