package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "the chaos suite's double-run check", func(ev *taskv1.TaskEvent) error {
		_, _, _, _, err := attemptStep(ev)
		return err
	})
}

func leased(a string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: a}}}
}

func succeeded(a string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: a}}}
}

func expired(a string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{AttemptId: a}}}
}

func started(a string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: a}}}
}

func TestDoubleRunsFromTheEventLog(t *testing.T) {
	tests := []struct {
		name   string
		events []*taskv1.TaskEvent
		want   string // "" = no double run
	}{
		{"one attempt", []*taskv1.TaskEvent{leased("a1"), started("a1"), succeeded("a1")}, ""},
		{"lost, then another attempt", []*taskv1.TaskEvent{leased("a1"), started("a1"), expired("a1"), leased("a2"), succeeded("a2")}, ""},
		{"leased while running", []*taskv1.TaskEvent{leased("a1"), started("a1"), leased("a2")}, "leased while a1 was running"},
		{"completed twice", []*taskv1.TaskEvent{leased("a1"), succeeded("a1"), leased("a2"), succeeded("a2")}, "completed a second time"},
		{"completed by an old attempt", []*taskv1.TaskEvent{leased("a1"), expired("a1"), leased("a2"), succeeded("a1")}, "completed by attempt a1"},
		{"started by an old attempt", []*taskv1.TaskEvent{leased("a1"), expired("a1"), leased("a2"), started("a1")}, "attempt a1 reported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r taskRuns
			got := ""
			for _, ev := range tt.events {
				bad, err := r.step(ev)
				if err != nil {
					t.Fatal(err)
				}
				if bad != "" && got == "" {
					got = bad
				}
			}
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("double run = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestServerErrorsMustBe503InsideAnOutage(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	windows := []window{
		{kind: faultKill, target: "scheduler-1", start: t0, end: t0.Add(2 * time.Second), api: true},
		{kind: faultAgentCut, target: "agent-1", start: t0.Add(time.Minute), end: t0.Add(70 * time.Second)},
	}
	errs := []serverError{
		{at: t0.Add(time.Second), path: "/api/v1/tasks", status: 503, code: "30099"},        // inside
		{at: t0.Add(5 * time.Second), status: 503, code: "grpc Unavailable"},                // in the slack
		{at: t0.Add(time.Second), path: "/jobs", status: 503, code: `"ServiceUnavailable"`}, // the pipeline's envelope
		{at: t0.Add(time.Second), path: "/jobs/uploads", status: 503, code: `"ServiceUnavailable"`},
		{at: t0.Add(time.Second), path: "/v1/video/generations", status: 503, code: `"ServiceUnavailable"`}, // the video API's
		{at: t0.Add(time.Second), path: "/api/v1/tasks", status: 500, code: "30099"},                        // not a 503
		{at: t0.Add(time.Second), path: "/jobs", status: 503, code: "30099"},                                // not the route's envelope
		{at: t0.Add(time.Second), path: "/api/v1/tasks", status: 503, code: `"ServiceUnavailable"`},         // nor here
		{at: t0.Add(65 * time.Second), path: "/api/v1/tasks", status: 503, code: "30099"},                   // an agent's fault does not excuse it
		{at: t0.Add(-time.Second), path: "/api/v1/tasks", status: 503, code: "30099"},                       // before any fault
	}
	inv := checkServerErrors(errs, windows, 10*time.Second)
	if inv.Count != 5 {
		t.Fatalf("offenders = %d %v, want 5", inv.Count, inv.First)
	}
}

// A video lost with its agent fails by design (it is not retried); any
// other end but completion is an offence.
func TestVideoOutcome(t *testing.T) {
	for _, c := range []struct {
		status, why string
		want        int
	}{
		{"completed", "", videoCompleted},
		{"failed", "lease expired: agent_lost", videoAgentLost},
		{"failed", "fenced: the server had not answered this agent for 2.667s and could lease the task again, so it was stopped", videoAgentLost},
		{"failed", "orphaned: no agent attached for 2.666666666s", videoAgentLost},
		{"failed", "stopped by the server: fenced", videoFailed},
		{"failed", "result upload failed: 503", videoFailed},
		{"failed", "", videoFailed},
		{"cancelled", "cancelled", videoFailed},
		{"running", "", videoOpen},
	} {
		if got := videoOutcome(c.status, c.why); got != c.want {
			t.Errorf("videoOutcome(%q, %q) = %d, want %d", c.status, c.why, got, c.want)
		}
	}
}

func TestReplayDiffsNamesWhatDiffers(t *testing.T) {
	out := `tasks (inline projection): 10 tasks from 40 events, 2 differ
  differing: t-1, task_group/g-1
quota (inline projection): 3 aggregates from 9 events, 0 differ
task_read_models → task_views: 40 records replayed in 5ms (0 skipped as dead letters); live 10 rows, replay 10 rows, 0 only live, 0 only replay
usage → usage_records: 40 records replayed in 5ms (0 skipped as dead letters); live 10 rows, replay 9 rows, 1 only live, 0 only replay
`
	got := replayDiffs(out)
	if len(got) != 2 || got[0] != "tasks (inline projection): 2 differ (t-1, task_group/g-1)" || !strings.HasPrefix(got[1], "usage → usage_records") {
		t.Fatalf("differences = %q", got)
	}
}

// A cut proxy drops the open connection and refuses new ones; healed, it
// carries traffic again.
func TestProxyCutsAndHeals(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); buf := make([]byte, 64); n, _ := c.Read(buf); _, _ = c.Write(buf[:n]) }()
		}
	}()
	p, err := newProxy("127.0.0.1:0", []string{echo.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	roundTrip := func() error {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err = c.Read(buf)
		return err
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	held, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.conns) == 2 })
	p.setCut(true)
	_ = held.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("an open connection survived the cut: %v", err)
	}
	if err := roundTrip(); err == nil {
		t.Fatal("a new connection got through the cut")
	}
	p.setCut(false)
	if err := roundTrip(); err != nil {
		t.Fatalf("after healing: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOverAdmissionFromAdmissionEvents(t *testing.T) {
	gpu := "nvidia.com/gpu"
	queues := map[string]queueLimits{
		"high": {cohort: "tenants", nominal: map[string]int64{gpu: 2000}, borrow: map[string]int64{}},
		"low":  {cohort: "tenants", nominal: map[string]int64{gpu: 1000}, borrow: map[string]int64{gpu: 1000}},
	}
	queued := func(task string, gpus int64) *quotav1.QuotaEvent {
		return &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadQueued{WorkloadQueued: &quotav1.WorkloadQueued{TaskId: task, Requests: map[string]int64{gpu: gpus * 1000}}}}
	}
	admitted := func(task, cq string) *quotav1.QuotaEvent {
		return &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadAdmitted{WorkloadAdmitted: &quotav1.WorkloadAdmitted{TaskId: task, ClusterQueue: cq}}}
	}
	finished := func(task string) *quotav1.QuotaEvent {
		return &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadFinished{WorkloadFinished: &quotav1.WorkloadFinished{TaskId: task}}}
	}
	defined := func(cq, gpus string) *quotav1.QuotaEvent {
		return &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_ClusterQueueDefined{ClusterQueueDefined: &quotav1.ClusterQueueDefined{Name: cq,
			Spec: &quotav1.ClusterQueueSpec{ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{gpu},
				Flavors: []*quotav1.FlavorQuotas{{Name: "f", Resources: []*quotav1.ResourceQuota{{Name: gpu, NominalQuota: gpus}}}}}}}}}}
	}
	tests := []struct {
		name   string
		events []*quotav1.QuotaEvent
		want   string
	}{
		{"a raised quota admits more", []*quotav1.QuotaEvent{defined("own", "1"), queued("t1", 1), admitted("t1", "own"),
			defined("own", "2"), queued("t2", 1), admitted("t2", "own")}, ""},
		{"a lowered quota admits less", []*quotav1.QuotaEvent{defined("own", "2"), queued("t1", 1), admitted("t1", "own"),
			defined("own", "1"), queued("t2", 1), admitted("t2", "own")}, "put own at 2000"},
		{"an undefined queue", []*quotav1.QuotaEvent{queued("t1", 1), admitted("t1", "nowhere")}, "not defined"},
		{"within quota, borrowing included", []*quotav1.QuotaEvent{queued("t1", 1), admitted("t1", "low"), queued("t2", 1), admitted("t2", "low")}, ""},
		{"released quota is reused", []*quotav1.QuotaEvent{queued("t1", 3), admitted("t1", "high"), finished("t1"), queued("t2", 3), admitted("t2", "high")}, ""},
		{"beyond the borrowing limit", []*quotav1.QuotaEvent{queued("t1", 1), admitted("t1", "low"), queued("t2", 2), admitted("t2", "low")}, "put low at 3000"},
		{"beyond the cohort", []*quotav1.QuotaEvent{queued("t1", 2), admitted("t1", "high"), queued("t2", 2), admitted("t2", "low")}, "put cohort tenants at 4000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger(maps.Clone(queues))
			got := ""
			for _, ev := range tt.events {
				bad, err := l.step(ev)
				if err != nil {
					t.Fatal(err)
				}
				if bad != "" && got == "" {
					got = bad
				}
			}
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("over-admission = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHeaderVersionFromKcat(t *testing.T) {
	h := "taskmesh-position=0/12,taskmesh-relay=scheduler,taskmesh-event-type=TaskLeased,taskmesh-version=3,taskmesh-tenant=chaos"
	if v, ok := headerVersion(h); !ok || v != 3 {
		t.Fatalf("version = %d %v, want 3", v, ok)
	}
	if _, ok := headerVersion("taskmesh-relay=scheduler"); ok {
		t.Fatal("a record without the version header has a version")
	}
}

func TestRunRefusesABadConfig(t *testing.T) {
	good := Config{Binary: "/bin/true", Rate: 10, Duration: time.Minute, Drain: time.Minute}
	for name, change := range map[string]func(*Config){
		"no binary":      func(c *Config) { c.Binary = "" },
		"no rate":        func(c *Config) { c.Rate = 0 },
		"a rate too big": func(c *Config) { c.Rate = 10001 },
		"no duration":    func(c *Config) { c.Duration = 0 },
		"no drain":       func(c *Config) { c.Drain = -time.Second },
	} {
		cfg := good
		change(&cfg)
		if _, err := Run(t.Context(), cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFaultsNotHealedCount(t *testing.T) {
	inv := checkHealed([]window{{kind: faultKill, target: "gateway-1"}, {kind: faultKill, target: "scheduler-2", err: errors.New("did not become ready")}})
	if inv.Count != 1 || !strings.Contains(inv.First[0], "scheduler-2") {
		t.Fatalf("%+v", inv)
	}
}

// A drain that cannot read the work says so, instead of reporting that
// nothing was left open.
func TestDrainReportsWorkItCouldNotRead(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d := &drainer{read: func(ctx context.Context) ([]string, error) {
		return openWork(ctx, pool, []request{{key: "k", kind: "true", id: "t1"}}, map[string]bool{})
	}, period: 1500 * time.Millisecond, extension: 1500 * time.Millisecond, stall: 500 * time.Millisecond, poll: 100 * time.Millisecond}
	err = d.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Fatalf("drain = %v, want an error saying the work could not be read", err)
	}
	if d.atStart != -1 {
		t.Fatalf("open work at the start = %d, want -1 (never read)", d.atStart)
	}
	if got := served([]request{{key: "k", kind: "true", id: "t1"}}, d.atStart, time.Minute); got != "" {
		t.Fatalf("served = %q, want nothing said when the open work was never read", got)
	}
}

// What was served during the load is the accepted work less what the
// drain found open: quota changes and refused requests are not work.
func TestServedCountsAcceptedWorkThatEnded(t *testing.T) {
	reqs := []request{{id: "t1"}, {id: "t2"}, {id: "g1", group: true}, {id: "j1", job: true}, {id: "q1", quota: true}, {key: "refused"}}
	got := served(reqs, 1, 2*time.Second)
	want := "3 of 4 accepted requests ended (1.5/s); 1 open when it stopped"
	if got != want {
		t.Fatalf("served = %q, want %q", got, want)
	}
}

// shrinking is open work of which one item ends every step, from n items.
func shrinking(n int, step time.Duration) func(context.Context) ([]string, error) {
	start := time.Now()
	return func(context.Context) ([]string, error) {
		left := max(0, n-int(time.Since(start)/step))
		open := make([]string, left)
		for i := range open {
			open[i] = fmt.Sprintf("t%d=running", i)
		}
		return open, nil
	}
}

// A backlog that keeps ending past the drain period is waited for, up to
// the extension past it; work that stops ending is reported once it has not
// moved for the stall; so is a backlog that outlasts the extension.
func TestDrainWaitsForABacklogThatKeepsEnding(t *testing.T) {
	const period, stall, poll = time.Second, 500 * time.Millisecond, 10 * time.Millisecond
	t.Run("backlog", func(t *testing.T) {
		// Ten items, one ending every 120 ms: 1.2 s, past the period.
		d := &drainer{read: shrinking(10, 120*time.Millisecond), period: period, extension: period, stall: stall, poll: poll}
		if err := d.run(context.Background()); err != nil {
			t.Fatalf("drain = %v, want the backlog waited for", err)
		}
		if d.atStart != 10 {
			t.Fatalf("open work at the start = %d, want 10", d.atStart)
		}
		if d.extendedFor <= 0 || d.extendedFor >= period {
			t.Fatalf("extended for %s, want between 0 and %s", d.extendedFor, period)
		}
	})
	t.Run("stuck", func(t *testing.T) {
		// Three items end in the first 150 ms, then two never do.
		read := shrinking(5, 50*time.Millisecond)
		stuck := func(ctx context.Context) ([]string, error) {
			open, err := read(ctx)
			if len(open) < 2 {
				open = []string{"t0=running", "t1=running"}
			}
			return open, err
		}
		d := &drainer{read: stuck, period: period, extension: period, stall: stall, poll: poll}
		start := time.Now()
		err := d.run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "still open after the drain period (1s): 2 ([t0=running t1=running])") {
			t.Fatalf("drain = %v, want the two stuck items named", err)
		}
		// Their last end was long enough before the period's end.
		if took := time.Since(start); took > period+stall {
			t.Fatalf("the drain took %s with nothing ending since before its period ended", took)
		}
	})
	t.Run("endless", func(t *testing.T) {
		// One item ends every 100 ms of a thousand: never done.
		d := &drainer{read: shrinking(1000, 100*time.Millisecond), period: period, extension: period, stall: stall, poll: poll}
		err := d.run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "extended by") {
			t.Fatalf("drain = %v, want it ended after a second period", err)
		}
		if d.extendedFor < period || d.extendedFor > period+stall {
			t.Fatalf("extended for %s, want about %s", d.extendedFor, period)
		}
	})
	t.Run("long extension", func(t *testing.T) {
		// A backlog of a long load: 25 items, one ending every 100 ms,
		// takes 2.5 s; the extension (1.8 s) lets it end past a second
		// period, where the default of one period would have cut it.
		d := &drainer{read: shrinking(25, 100*time.Millisecond), period: period, extension: 1800 * time.Millisecond, stall: stall, poll: poll}
		if err := d.run(context.Background()); err != nil {
			t.Fatalf("drain = %v, want the backlog waited for", err)
		}
		if d.extendedFor <= period {
			t.Fatalf("extended for %s, want past a second period", d.extendedFor)
		}
	})
}

// The extension is another period, or the load's duration when longer.
func TestDrainExtensionGrowsWithTheLoad(t *testing.T) {
	for _, c := range []struct{ period, load, want time.Duration }{
		{3 * time.Minute, 10 * time.Minute, 10 * time.Minute},
		{2 * time.Minute, time.Minute, 2 * time.Minute},
		{3 * time.Minute, 3 * time.Minute, 3 * time.Minute},
	} {
		if got := drainExtension(c.period, c.load); got != c.want {
			t.Errorf("drainExtension(%s, %s) = %s, want %s", c.period, c.load, got, c.want)
		}
	}
}

// A process that ends on its own is recorded with its exit status, once;
// one the driver kills or stops at the end is not, and a restart after a
// kill is watched again.
func TestProcessesThatExitOnTheirOwnAreRecorded(t *testing.T) {
	dir := t.TempDir()
	var out logbuf.Buffer // written by the processes' watchers
	exits := &exitLog{out: &out}
	crasher := &proc{name: "crasher-1", kind: "crasher", path: "/bin/sh", args: []string{"-c", "exit 3"}, log: filepath.Join(dir, "crasher.log"), exits: exits}
	sleeper := &proc{name: "sleeper-1", kind: "sleeper", path: "/bin/sleep", args: []string{"60"}, log: filepath.Join(dir, "sleeper.log"), exits: exits}
	for _, p := range []*proc{crasher, sleeper} {
		if err := p.start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	<-crasher.done
	sleeper.kill() // a kill fault
	if err := sleeper.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sleeper.stopGroup() // the end of the run

	got := exits.snapshot()
	if len(got) != 1 || got[0].name != "crasher-1" || got[0].status != "exit status 3" || got[0].log != crasher.log {
		t.Fatalf("exits = %+v, want crasher-1 with exit status 3 alone", got)
	}
	if !strings.Contains(out.String(), "crasher-1 exited on its own") {
		t.Errorf("the exit was not printed as it happened: %q", out.String())
	}
	inv := checkExits(got, 2)
	if inv.Count != 1 || !strings.Contains(inv.First[0], "crasher-1") || !strings.Contains(inv.First[0], "exit status 3") {
		t.Fatalf("%+v", inv)
	}

	// Restarted by hand and killed from outside the driver: recorded too.
	if err := sleeper.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sleeper.mu.Lock()
	pid := sleeper.cmd.Process.Pid
	sleeper.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sleeper.done
	got = exits.snapshot()
	if len(got) != 2 || got[1].name != "sleeper-1" || got[1].status != "signal: killed" {
		t.Fatalf("exits = %+v, want sleeper-1 killed from outside second", got)
	}
	if inv := checkExits(nil, 2); inv.Count != 0 {
		t.Fatalf("no exits: %+v", inv)
	}
}

// The stream is measured against the store as it was when the check
// began: events written since may still be on their way, an aggregate
// the store holds now may be on the topic, and the order of what is there
// counts at once.
func TestCompareStream(t *testing.T) {
	target := map[string]int64{"a": 2, "b": 3}
	stored := map[string]int64{"a": 4, "b": 3, "c": 1} // a and c went on after the check began

	inv := Invariant{}
	seen := map[string][]int64{"a": {1, 2}, "b": {1, 2, 3}, "c": {1}}
	if missing := compareStream(&inv, seen, stored, target); missing != 0 || inv.Count != 0 {
		t.Fatalf("a stream holding the store at the start: missing %d, %+v", missing, inv)
	}

	inv = Invariant{}
	seen = map[string][]int64{"a": {1}, "b": {1, 2, 3}}
	if missing := compareStream(&inv, seen, stored, target); missing != 1 || inv.Count != 1 || !strings.Contains(inv.First[0], "1 aggregates with events not yet on the topic") {
		t.Fatalf("a's version 2 not on the topic: missing %d, %+v", missing, inv)
	}

	inv = Invariant{}
	seen = map[string][]int64{"a": {1, 2, 2}, "b": {1, 3, 2}, "c": {1}, "x": {1}}
	compareStream(&inv, seen, stored, target)
	want := []string{
		"a: record 3 is version 2, want 3 (duplicate, gap or disorder)",
		"b: record 2 is version 3, want 2 (duplicate, gap or disorder)",
		"x: on the topic, not in the event store",
	}
	if inv.Count != len(want) || !slices.Equal(inv.First, want) {
		t.Fatalf("offences %d %q, want %q", inv.Count, inv.First, want)
	}
}

// A read that comes back past the period (a poll held up on a busy
// machine) is the period's last read, not an extension: work that never
// ended is reported after the period alone.
func TestDrainALateReadExtendsNothing(t *testing.T) {
	// Every read takes 30 ms and the polls are 10 ms apart: the reads end
	// at 30, 70 and 110 ms or later, the third at least 10 ms past the
	// period of 100 ms.
	slow := func(context.Context) ([]string, error) {
		time.Sleep(30 * time.Millisecond)
		return []string{"t0=running"}, nil
	}
	d := &drainer{read: slow, period: 100 * time.Millisecond, extension: 100 * time.Millisecond, stall: 50 * time.Millisecond, poll: 10 * time.Millisecond}
	err := d.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "still open after the drain period (100ms): 1 ([t0=running])") {
		t.Fatalf("drain = %v, want the item reported after the period, not extended", err)
	}
	if d.extendedFor != 0 {
		t.Fatalf("extended for %s, want 0: nothing ended", d.extendedFor)
	}
}

// The drain's polls read only the work not yet found final: an id in
// ended is not asked for again, and quota changes and refused requests
// are never work.
func TestDrainReadsOnlyWorkNotYetEnded(t *testing.T) {
	reqs := []request{{id: "t1"}, {id: "t2"}, {id: "g1", group: true}, {id: "g2", group: true}, {id: "j1", job: true},
		{id: "q1", quota: true}, {key: "refused"}}
	tasks, groups, jobs := workIDs(reqs, nil)
	if !slices.Equal(tasks, []string{"t1", "t2"}) || !slices.Equal(groups, []string{"g1", "g2"}) || !slices.Equal(jobs, []string{"j1"}) {
		t.Fatalf("nothing ended: tasks %v, groups %v, jobs %v", tasks, groups, jobs)
	}
	tasks, groups, jobs = workIDs(reqs, map[string]bool{"t1": true, "g2": true, "j1": true})
	if !slices.Equal(tasks, []string{"t2"}) || !slices.Equal(groups, []string{"g1"}) || len(jobs) != 0 {
		t.Fatalf("t1, g2 and j1 ended: tasks %v, groups %v, jobs %v", tasks, groups, jobs)
	}
}
