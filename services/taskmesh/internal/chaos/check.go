package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/outbox"
)

// Invariant is one checked property of a run: Count offenders (0 holds),
// the first few offending ids, and what was looked at.
type Invariant struct {
	Name    string
	Count   int
	First   []string
	Checked string // e.g. "2114 accepted requests"
}

func (i *Invariant) offend(id string) {
	i.Count++
	if len(i.First) < 5 {
		i.First = append(i.First, id)
	}
}

// final are the task, group and conversion job statuses nothing moves out
// of by itself.
var final = map[string]bool{"completed": true, "failed": true, "cancelled": true, "COMPLETED": true, "FAILED": true}

// drainStall is how long the drain goes on past its period without any
// open work ending: longer than a video's render or a GPU task's turn in
// its queue on a loaded 2-core machine, so a backlog still being served
// keeps the drain going and a stuck task does not.
const drainStall = time.Minute

// drainPoll is how often the drain reads the open work.
const drainPoll = time.Second

// drainExtension is the most a drain goes on past its period while work
// keeps ending: another period, or the load's duration when that is
// longer. A run whose rate is above the deployment's capacity ends its
// load with a backlog about (offered/served - 1) times the duration's
// worth of serving, so a bound that grows with the duration lets a ten
// minute run at up to twice the capacity finish its work; the stall
// still ends the drain for work that stops ending.
func drainExtension(period, load time.Duration) time.Duration { return max(period, load) }

// drainer waits for the accepted work to end after the load stopped.
//
// It waits up to period. Work still open then is not lost as long as some
// of it keeps ending: small queues (a GPU queue, the video renders) serve
// what arrived during the run more slowly on a slow or busy machine than
// on a fast one, and their backlog left at the period's end is work being
// done, not work dropped. So past the period the drain goes on while the
// open work keeps shrinking, at least once every stall, for at most
// extension more. Work that never ends stops the shrinking, and the drain
// ends stall after the last work that did (or at once, if that was longer
// ago), leaving it to the lost invariant.
//
// The same holds for a backlog the whole deployment built up: a rate
// above what the machine serves under the faults leaves work queued when
// the load stops, and it is served, not lost, as long as it keeps ending.
// Run sets the extension to the longer of the period and the load's
// duration, as the backlog grows with the duration (see drainExtension).
type drainer struct {
	read        func(context.Context) ([]string, error) // the open work
	period      time.Duration
	extension   time.Duration // the most the drain goes on past period
	stall, poll time.Duration
	extendedFor time.Duration // past period, when the drain ended; 0 unless it went on for work still ending
	// atStart is the open work the drain's first successful read found,
	// when the load had just stopped: what the deployment had not yet
	// served of the work it accepted. -1 while no read has succeeded.
	atStart int
}

// run waits until no work is open (nil), or the drain ends with work open
// or unreadable (an error naming it), or ctx ends.
func (d *drainer) run(ctx context.Context) error {
	start := time.Now()
	var last []string // the last list read; a failed read keeps the one before
	var lastErr error
	lastEnded := start // when the open work last shrank
	// extending: a read past the period found work still ending, and the
	// drain went on. Only then is the time past the period an extension;
	// a read that merely came late (a poll held up on a busy machine)
	// extends nothing.
	extending := false
	d.atStart = -1
	for {
		open, err := d.read(ctx)
		now := time.Now()
		if err == nil && d.atStart < 0 {
			d.atStart = len(open)
		}
		d.extendedFor = 0
		if extending {
			d.extendedFor = max(0, now.Sub(start)-d.period).Truncate(d.poll)
		}
		if err == nil && len(open) == 0 {
			return nil
		}
		if err == nil {
			if last != nil && len(open) < len(last) {
				lastEnded = now
			}
			last = open
		}
		lastErr = err
		over := now.Sub(start) >= d.period &&
			(now.Sub(lastEnded) >= d.stall || now.Sub(start) >= d.period+d.extension)
		if over || ctx.Err() != nil {
			took := fmt.Sprintf("the drain period (%s", d.period)
			if d.extendedFor > 0 {
				took += fmt.Sprintf(", extended by %s while work kept ending", d.extendedFor)
			}
			took += ")"
			if last == nil && lastErr != nil {
				return fmt.Errorf("still open after %s: unknown, the work could not be read: %w", took, lastErr)
			}
			return fmt.Errorf("still open after %s: %d (%v)", took, len(last), firstN(last, 5))
		}
		extending = now.Sub(start) >= d.period
		select {
		case <-ctx.Done():
		case <-time.After(d.poll):
		}
	}
}

// openWork lists the accepted tasks, groups and conversion jobs that are
// not final. ended, when not nil, holds the ids found final by earlier
// reads: they are not read again (a final state is final), and the ids
// found final now join them. The drain's polls then read only the work
// still open, where reading every accepted id each second scanned the
// whole task table while the deployment was still draining.
func openWork(ctx context.Context, db *pgxpool.Pool, reqs []request, ended map[string]bool) ([]string, error) {
	tasks, groups, jobs := workIDs(reqs, ended)
	status := map[string]string{}
	for _, q := range []struct {
		sql string
		ids []string
	}{{`SELECT id, status FROM scheduler.tasks WHERE id = ANY($1)`, tasks},
		{`SELECT id, status FROM scheduler.task_groups WHERE id = ANY($1)`, groups},
		{`SELECT job_id, status FROM pipeline.jobs WHERE job_id = ANY($1)`, jobs}} {
		if len(q.ids) == 0 {
			continue
		}
		rows, err := db.Query(ctx, q.sql, q.ids)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return nil, err
			}
			status[id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var open []string
	for _, id := range append(append(tasks, groups...), jobs...) {
		switch {
		case !final[status[id]]:
			open = append(open, id+"="+orMissing(status[id]))
		case ended != nil:
			ended[id] = true
		}
	}
	return open, nil
}

// workIDs are the ids of the accepted tasks, groups and conversion jobs
// of reqs, less those in ended.
func workIDs(reqs []request, ended map[string]bool) (tasks, groups, jobs []string) {
	for _, r := range reqs {
		switch {
		case r.id == "" || r.quota || ended[r.id]:
		case r.group:
			groups = append(groups, r.id)
		case r.job:
			jobs = append(jobs, r.id)
		default:
			tasks = append(tasks, r.id)
		}
	}
	return tasks, groups, jobs
}

func orMissing(s string) string {
	if s == "" {
		return "missing"
	}
	return s
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

// checkHealed: every fault was injected and healed (a process that does
// not come back leaves the rest of the run without it).
func checkHealed(windows []window) Invariant {
	inv := Invariant{Name: "faults not healed", Checked: fmt.Sprintf("%d faults", len(windows))}
	for _, w := range windows {
		if w.err != nil {
			inv.offend(w.kind + " " + w.target + ": " + truncate(w.err.Error(), 200))
		}
	}
	return inv
}

// checkExits: no process ended but by the driver's hand. A process that
// serves after its restart and then exits is not caught by checkHealed.
func checkExits(exits []procExit, procs int) Invariant {
	inv := Invariant{Name: "processes that exited on their own", Checked: fmt.Sprintf("%d processes", procs)}
	for _, e := range exits {
		inv.offend(fmt.Sprintf("%s at %s: %s (log: %s)", e.name, e.at.UTC().Format("15:04:05.000"), e.status, e.log))
	}
	return inv
}

// acceptedWork counts the accepted requests that made work of their own:
// quota changes make none, refused requests have no id.
func acceptedWork(reqs []request) int {
	n := 0
	for _, r := range reqs {
		if r.id != "" && !r.quota {
			n++
		}
	}
	return n
}

// checkLost: every accepted request reached a final state.
func checkLost(ctx context.Context, db *pgxpool.Pool, reqs []request) (Invariant, error) {
	inv := Invariant{Name: "lost (accepted, not final)"}
	inv.Checked = fmt.Sprintf("%d accepted requests", acceptedWork(reqs))
	open, err := openWork(ctx, db, reqs, nil)
	if err != nil {
		return inv, err
	}
	for _, id := range open {
		inv.offend(id)
	}
	return inv, nil
}

// checkJobsFailed: every conversion job that ended completed. Its stages
// are retried (the deployment's --pipeline-stage-retries), and a stage
// worker retries its transfers while a gateway restarts, so no fault here
// should fail a job; a job that failed names its stage and reason.
func checkJobsFailed(ctx context.Context, db *pgxpool.Pool, reqs []request) (Invariant, error) {
	inv := Invariant{Name: "conversion jobs failed"}
	var ids []string
	for _, r := range reqs {
		if r.job && r.id != "" {
			ids = append(ids, r.id)
		}
	}
	rows, err := db.Query(ctx, `SELECT job_id, status, coalesce(doc->'error'->>'step', ''), coalesce(doc->'error'->>'reason', '')
		FROM pipeline.jobs WHERE job_id = ANY($1) ORDER BY job_id`, ids)
	if err != nil {
		return inv, err
	}
	completed := 0
	for rows.Next() {
		var id, st, step, reason string
		if err := rows.Scan(&id, &st, &step, &reason); err != nil {
			rows.Close()
			return inv, err
		}
		switch st {
		case "COMPLETED":
			completed++
		case "FAILED":
			inv.offend(id + " " + step + ": " + truncate(reason, 160))
		}
	}
	rows.Close()
	inv.Checked = fmt.Sprintf("%d accepted jobs, %d completed", len(ids), completed)
	return inv, rows.Err()
}

// checkVideosFailed: every video generation that ended completed, but for
// one whose agent was lost under it. A generation is not retried
// (docs/api/video.md, "Routing"), so a lease that expired with its agent
// (killed, stopped or cut off here) fails it by design; any other failure
// — a render, an upload, a result the object store lost — is an offence.
func checkVideosFailed(ctx context.Context, db *pgxpool.Pool, reqs []request) (Invariant, error) {
	inv := Invariant{Name: "videos failed, not by a lost agent"}
	var ids []string
	for _, r := range reqs {
		if r.video && r.id != "" {
			ids = append(ids, r.id)
		}
	}
	rows, err := db.Query(ctx, `SELECT id, status, coalesce(doc->>'error', '') FROM scheduler.tasks WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return inv, err
	}
	completed, agentLost := 0, 0
	for rows.Next() {
		var id, st, why string
		if err := rows.Scan(&id, &st, &why); err != nil {
			rows.Close()
			return inv, err
		}
		switch videoOutcome(st, why) {
		case videoCompleted:
			completed++
		case videoAgentLost:
			agentLost++
		case videoFailed:
			inv.offend(id + " " + st + ": " + truncate(why, 160))
		}
	}
	rows.Close()
	inv.Checked = fmt.Sprintf("%d accepted generations, %d completed, %d failed with their agent", len(ids), completed, agentLost)
	return inv, rows.Err()
}

// How a video generation's task ended, for checkVideosFailed.
const (
	videoOpen = iota
	videoCompleted
	videoAgentLost // failed by a lease that expired with its agent, or stopped by its shim for it
	videoFailed
)

// videoOutcome classifies a video task by its status and error.
func videoOutcome(status, why string) int {
	switch {
	case status == "completed":
		return videoCompleted
	case status == "failed" && strings.HasPrefix(why, "lease expired"):
		return videoAgentLost
	case status == "failed" && (strings.HasPrefix(why, "fenced:") || strings.HasPrefix(why, "orphaned:")):
		// The same loss seen from the agent, which reported it in time:
		// its shim stopped the render because the server had not answered
		// the agent for the fence (docs/executor.md, "Fencing"), or no
		// agent was attached for the orphan grace.
		return videoAgentLost
	case status == "failed" || status == "cancelled":
		return videoFailed
	}
	return videoOpen
}

// checkUnanswered: every request was eventually accepted (each is
// retried with its key until the drain ends).
func checkUnanswered(reqs []request, rejected []string) Invariant {
	inv := Invariant{Name: "unanswered or refused requests", Checked: fmt.Sprintf("%d requests", len(reqs))}
	for _, r := range reqs {
		if r.id == "" {
			inv.offend(r.key)
		}
	}
	for _, r := range rejected {
		inv.offend(r)
	}
	return inv
}

// attemptStep says what a task event does to the task's attempts: opens
// an attempt, refers to one (it must be the open one), closes one, or
// touches none. An event it has no case for is an error.
func attemptStep(ev *taskv1.TaskEvent) (opens, uses, closes string, succeeded bool, err error) {
	switch e := ev.GetEvent().(type) {
	case *taskv1.TaskEvent_Leased:
		return e.Leased.GetAttemptId(), "", "", false, nil
	case *taskv1.TaskEvent_Started:
		return "", e.Started.GetAttemptId(), "", false, nil
	case *taskv1.TaskEvent_Progressed:
		return "", e.Progressed.GetAttemptId(), "", false, nil
	case *taskv1.TaskEvent_LeaseRenewed:
		return "", e.LeaseRenewed.GetAttemptId(), "", false, nil
	case *taskv1.TaskEvent_Checkpointed:
		return "", "", "", false, nil // recorded while the attempt is current or just preempted
	case *taskv1.TaskEvent_Succeeded:
		return "", "", e.Succeeded.GetAttemptId(), true, nil
	case *taskv1.TaskEvent_Failed:
		return "", "", or(e.Failed.GetAttemptId(), "*"), false, nil
	case *taskv1.TaskEvent_LeaseExpired:
		return "", "", or(e.LeaseExpired.GetAttemptId(), "*"), false, nil
	case *taskv1.TaskEvent_Preempted:
		return "", "", or(e.Preempted.GetAttemptId(), "*"), false, nil
	case *taskv1.TaskEvent_Suspended:
		return "", "", or(e.Suspended.GetAttemptId(), "*"), false, nil
	case *taskv1.TaskEvent_Canceled:
		return "", "", or(e.Canceled.GetAttemptId(), "*"), false, nil
	case *taskv1.TaskEvent_Deleted, *taskv1.TaskEvent_Expired:
		return "", "", "*", false, nil
	case *taskv1.TaskEvent_Submitted, *taskv1.TaskEvent_Updated, *taskv1.TaskEvent_Admitted,
		*taskv1.TaskEvent_RetryScheduled, *taskv1.TaskEvent_Requeued, *taskv1.TaskEvent_DependenciesMet:
		return "", "", "", false, nil
	}
	return "", "", "", false, fmt.Errorf("no case for task event %T", ev.GetEvent())
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// taskRuns follows one task's attempts through its events.
type taskRuns struct {
	open      string
	succeeded int
}

// step applies one event; a non-empty result is the double run it shows.
func (r *taskRuns) step(ev *taskv1.TaskEvent) (string, error) {
	opens, uses, closes, ok, err := attemptStep(ev)
	if err != nil {
		return "", err
	}
	switch {
	case opens != "":
		if r.open != "" {
			return fmt.Sprintf("attempt %s leased while %s was running (v%d)", opens, r.open, ev.GetVersion()), nil
		}
		r.open = opens
	case uses != "" && uses != r.open:
		return fmt.Sprintf("attempt %s reported while %q was current (v%d)", uses, r.open, ev.GetVersion()), nil
	case closes != "":
		if ok {
			r.succeeded++
			if r.succeeded > 1 {
				return fmt.Sprintf("completed a second time by attempt %s (v%d)", closes, ev.GetVersion()), nil
			}
			if closes != r.open {
				return fmt.Sprintf("completed by attempt %s while %q was current (v%d)", closes, r.open, ev.GetVersion()), nil
			}
		}
		if closes == "*" || closes == r.open {
			r.open = ""
		}
	}
	return "", nil
}

// checkDoubleRuns reads every task's events in version order: no task
// completed twice or by an attempt that was not current, no attempt leased
// while another was still running (the lease rules end an attempt only by
// an event: lease expired, failed, preempted, suspended, cancelled).
func checkDoubleRuns(ctx context.Context, db *pgxpool.Pool) (Invariant, error) {
	inv := Invariant{Name: "double runs"}
	rows, err := db.Query(ctx, `SELECT aggregate_id, payload FROM scheduler.events WHERE aggregate_type = 'task' ORDER BY aggregate_id, version`)
	if err != nil {
		return inv, err
	}
	defer rows.Close()
	runs := map[string]*taskRuns{}
	events := 0
	for rows.Next() {
		var id string
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			return inv, err
		}
		ev := &taskv1.TaskEvent{}
		if err := proto.Unmarshal(payload, ev); err != nil {
			return inv, fmt.Errorf("task %s: %w", id, err)
		}
		events++
		r := runs[id]
		if r == nil {
			r = &taskRuns{}
			runs[id] = r
		}
		bad, err := r.step(ev)
		if err != nil {
			return inv, err
		}
		if bad != "" {
			inv.offend(id + ": " + bad)
		}
	}
	inv.Checked = fmt.Sprintf("%d tasks, %d events", len(runs), events)
	return inv, rows.Err()
}

// checkServerErrors: every 5xx a client got was a documented 503 (code
// 30099, or gRPC Unavailable) answered inside an outage window of a fault
// that touches the front doors, or within slack after it ended.
// unavailableCode is the code a 503 carries in the envelope of the route
// at path (docs/api): the pipeline's /jobs routes and the video routes
// name it, the other REST routes number it, and gRPC answers Unavailable
// (recorded with an empty path).
func unavailableCode(path string) string {
	switch {
	case path == "":
		return "grpc Unavailable"
	case path == "/jobs" || strings.HasPrefix(path, "/jobs/"), strings.HasPrefix(path, "/v1/video/"):
		return `"ServiceUnavailable"`
	}
	return "30099"
}

func checkServerErrors(errs []serverError, windows []window, slack time.Duration) Invariant {
	inv := Invariant{Name: "5xx outside outage windows or not 503", Checked: fmt.Sprintf("%d server errors, %d outage windows", len(errs), len(windows))}
	for _, e := range errs {
		documented := e.status == 503 && e.code == unavailableCode(e.path)
		inside := false
		for _, w := range windows {
			if w.api && !e.at.Before(w.start) && !e.at.After(w.end.Add(slack)) {
				inside = true
				break
			}
		}
		if !documented || !inside {
			inv.offend(fmt.Sprintf("%s %s %d %s %q", e.at.UTC().Format("15:04:05.000"), e.via, e.status, e.code, truncate(e.body, 120)))
		}
	}
	return inv
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// checkReplay runs `taskmesh replay` against the deployment; its
// differences are the count. Kafka projections catch up after the drain,
// so a difference is looked at again, a few times, before it counts.
func checkReplay(ctx context.Context, bin, dbURL, brokers string) (Invariant, string, error) {
	inv := Invariant{Name: "projections differing from their replay"}
	var out []byte
	for try := 0; try < 4; try++ {
		cmd := exec.CommandContext(ctx, bin, "replay", "--database-url", dbURL, "--kafka-brokers", brokers)
		var err error
		out, err = cmd.CombinedOutput()
		if err == nil {
			inv.Checked = "taskmesh replay: " + firstLine(out)
			return inv, string(out), nil
		}
		if ctx.Err() != nil {
			return inv, string(out), ctx.Err()
		}
		time.Sleep(5 * time.Second)
	}
	inv.Checked = "taskmesh replay"
	for _, n := range replayDiffs(string(out)) {
		inv.offend(n)
	}
	if inv.Count == 0 {
		inv.offend("replay failed: " + truncate(string(out), 300))
	}
	return inv, string(out), nil
}

var (
	differRe = regexp.MustCompile(`^(.*?): .*?(\d+) differ`)
	onlyRe   = regexp.MustCompile(`^(\S+ → \S+):.* (\d+) only live, (\d+) only replay`)
)

// replayDiffs names each projection replay reported differences for,
// with the first differing aggregates replay names after an inline
// projection's count.
func replayDiffs(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if ids, ok := strings.CutPrefix(line, "  differing: "); ok && len(names) > 0 {
			names[len(names)-1] += " (" + ids + ")"
			continue
		}
		if m := differRe.FindStringSubmatch(line); m != nil && m[2] != "0" {
			names = append(names, m[1]+": "+m[2]+" differ")
		}
		if m := onlyRe.FindStringSubmatch(line); m != nil && (m[2] != "0" || m[3] != "0") {
			names = append(names, m[1]+": "+m[2]+" only live, "+m[3]+" only replay")
		}
	}
	return names
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	lines := strings.Split(s, "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// checkStream reads the relay's task and orchestration topics back
// (read_committed) and compares them with the event store: every event
// exactly once per (aggregate, version), in version order. Missing events
// may still be on their way after the drain, so the check is read again
// until nothing is missing or ctx ends; duplicates and disorder count at
// once.
//
// What must arrive is the event store as it was when the check began. Work
// that outlasted the drain goes on writing events while the check reads,
// and the newest of those are always a moment from the topic: measured
// against the store of each read, a relay that keeps up but never stops
// would never pass.
func checkStream(ctx context.Context, db *pgxpool.Pool, brokers []string) (Invariant, error) {
	reader := readerFor()
	// Read before the topics: every event it holds was committed before
	// they are read, so a relay that keeps up has put it there.
	target, err := storedVersions(ctx, db)
	if err != nil {
		return Invariant{Name: streamInvariant}, err
	}
	var last *Invariant
	for {
		inv, missing, err := streamOnce(ctx, db, brokers, reader, target)
		if err != nil && last != nil && ctx.Err() != nil {
			// Out of time while reading again: the last complete read
			// is the answer, with what it still missed.
			return *last, nil
		}
		if err != nil || missing == 0 || ctx.Err() != nil {
			return inv, err
		}
		last = &inv
		select {
		case <-ctx.Done():
			return inv, nil
		case <-time.After(3 * time.Second):
		}
	}
}

const streamInvariant = "relay stream not exactly once in order"

// topicReader reads topics from the start and returns each aggregate's
// versions in the order they came, and the number of records.
type topicReader struct {
	name string
	read func(ctx context.Context, brokers, topics []string) (map[string][]int64, int, error)
}

// readerFor is kcat, an independent client, when it is installed; else
// (or when kcat cannot finish: it stops only once every partition is
// read to its end, which a topic still being written may not give it)
// franz-go.
func readerFor() *topicReader {
	path, err := exec.LookPath("kcat")
	if err != nil {
		return &topicReader{"franz-go", readTopics}
	}
	r := &topicReader{name: "kcat"}
	r.read = func(ctx context.Context, brokers, topics []string) (map[string][]int64, int, error) {
		kctx, cancel := context.WithTimeout(ctx, kcatTimeout)
		defer cancel()
		seen, n, err := readTopicsKcat(kctx, path, brokers, topics)
		if err != nil && ctx.Err() == nil {
			r.name = "franz-go after kcat failed: " + truncate(err.Error(), 80)
			return readTopics(ctx, brokers, topics)
		}
		return seen, n, err
	}
	return r
}

// kcatTimeout bounds one kcat read of the topics.
const kcatTimeout = 45 * time.Second

// streamOnce reads the topics, then the event store, and compares them
// (compareStream) with target the events that must be on the topics.
func streamOnce(ctx context.Context, db *pgxpool.Pool, brokers []string, reader *topicReader, target map[string]int64) (Invariant, int, error) {
	inv := Invariant{Name: streamInvariant}
	topics := []string{kafka.EnvelopeTopic(&taskv1.TaskEvent{}), kafka.EnvelopeTopic(&taskv1.OrchestrationEvent{})}
	seen, records, err := reader.read(ctx, brokers, topics)
	if err != nil {
		return inv, 0, err
	}
	// After the topics: an aggregate on them is in the store by now.
	stored, err := storedVersions(ctx, db)
	if err != nil {
		return inv, 0, err
	}
	missing := compareStream(&inv, seen, stored, target)
	inv.Checked = fmt.Sprintf("%d records of %d aggregates (%s, read_committed)", records, len(stored), reader.name)
	return inv, missing, nil
}

// storedVersions is each relayed aggregate's newest version in the event
// store.
func storedVersions(ctx context.Context, db *pgxpool.Pool) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT aggregate_id, max(version) FROM scheduler.events
		WHERE aggregate_type IN ('task', 'task_group', 'template') GROUP BY aggregate_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	stored := map[string]int64{}
	for rows.Next() {
		var id string
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			return nil, err
		}
		stored[id] = v
	}
	return stored, rows.Err()
}

// compareStream charges inv with every aggregate whose records on the
// topic are not its versions 1, 2, 3… in order (duplicate, gap or
// disorder), and every aggregate on the topic the store does not hold; it
// returns how many aggregates of target have not all their events on the
// topic yet (charged once, as a count).
func compareStream(inv *Invariant, seen map[string][]int64, stored, target map[string]int64) (missing int) {
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for i, v := range seen[id] {
			if want := int64(i + 1); v != want {
				inv.offend(fmt.Sprintf("%s: record %d is version %d, want %d (duplicate, gap or disorder)", id, i+1, v, want))
				break
			}
		}
		if _, ok := stored[id]; !ok {
			inv.offend(id + ": on the topic, not in the event store")
		}
	}
	for id, v := range target {
		if int64(len(seen[id])) < v {
			missing++
		}
	}
	if missing > 0 {
		inv.offend(fmt.Sprintf("%d aggregates with events not yet on the topic", missing))
	}
	return missing
}

// readTopics reads topics from the start until a poll brings nothing new
// for quietFor (the end offsets of transactional topics hold control
// records no consumer is given, so they are no stopping mark), and returns
// each aggregate's versions in the order they came.
func readTopics(ctx context.Context, brokers, topics []string) (map[string][]int64, int, error) {
	cl, err := kgo.NewClient(append(kafka.ClientOpts(), kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	const quietFor = 3 * time.Second
	seen := map[string][]int64{}
	records := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, quietFor)
		fetches := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		got := 0
		fetches.EachRecord(func(r *kgo.Record) {
			got++
			if id, v, ok := identity(r); ok {
				records++
				seen[id] = append(seen[id], v)
			}
		})
		if got == 0 && pctx.Err() != nil {
			return seen, records, nil
		}
	}
}

// readTopicsKcat reads each topic with kcat (librdkafka) to its end: the
// record key is the aggregate, the relay's taskmesh-version header its
// version.
func readTopicsKcat(ctx context.Context, kcat string, brokers, topics []string) (map[string][]int64, int, error) {
	seen := map[string][]int64{}
	records := 0
	for _, topic := range topics {
		cmd := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(brokers, ","), "-t", topic, "-o", "beginning", "-e", "-q",
			"-X", "isolation.level=read_committed", "-f", "%k\t%h\n")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			return nil, 0, fmt.Errorf("kcat %s: %w: %s", topic, err, stderr)
		}
		for _, line := range strings.Split(string(out), "\n") {
			key, headers, ok := strings.Cut(line, "\t")
			if !ok {
				continue
			}
			v, ok := headerVersion(headers)
			if !ok {
				continue
			}
			records++
			seen[key] = append(seen[key], v)
		}
	}
	return seen, records, nil
}

// headerVersion finds taskmesh-version in kcat's "k=v,k=v" headers.
func headerVersion(headers string) (int64, bool) {
	for _, kv := range strings.Split(headers, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == outbox.HeaderVersion {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// identity decodes a record's aggregate and version.
func identity(r *kgo.Record) (string, int64, bool) {
	var m interface {
		proto.Message
		GetAggregateId() string
		GetVersion() int64
	}
	if r.Topic == kafka.EnvelopeTopic(&taskv1.TaskEvent{}) {
		m = &taskv1.TaskEvent{}
	} else {
		m = &taskv1.OrchestrationEvent{}
	}
	if err := proto.Unmarshal(r.Value, m); err != nil {
		return "", 0, false
	}
	return m.GetAggregateId(), m.GetVersion(), true
}
