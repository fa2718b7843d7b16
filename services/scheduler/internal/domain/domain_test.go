package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func spec(t *testing.T, mut func(*SpecInput)) Spec {
	t.Helper()
	in := SpecInput{Name: "train", Command: "python", Args: []string{"train.py"}}
	if mut != nil {
		mut(&in)
	}
	s, err := NormalizeSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ptr(i int) *int { return &i }

// run applies a command's records, failing the test on error.
func run(t *testing.T, task Task, recs []Record, err error) Task {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		task = Apply(task, r)
	}
	return task
}

func submitted(t *testing.T, mut func(*SpecInput)) Task {
	return Fold(Submit(t0, "task-1", "tenant-a", "key-1", "", "", spec(t, mut), ""))
}

func leased(t *testing.T, mut func(*SpecInput)) Task {
	task := submitted(t, mut)
	recs, err := task.Lease(t0.Add(time.Second), "att-1", "agent-1", "m-1", "req-1")
	return run(t, task, recs, err)
}

func TestNormalizeSpecDefaultsAndErrors(t *testing.T) {
	s := spec(t, nil)
	if s.Priority != 5 || s.MaxRetries != 3 || s.RetryDelay != 60 || s.Timeout != 3600 || s.LeaseTTL != 300 ||
		s.Type != TypeShell || s.Mode != ModeSingle || s.GracePeriod != 30 || s.RenewInterval != 60 {
		t.Fatalf("defaults = %+v", s)
	}
	big := map[string]string{}
	for i := 0; i < 100; i++ {
		big[string(rune('A'+i%26))+string(rune('A'+i/26))] = string(make([]byte, 1000))
	}
	tests := map[string]struct {
		mut   func(*SpecInput)
		field string
	}{
		"no name":            {func(in *SpecInput) { in.Name = " " }, "name"},
		"no command":         {func(in *SpecInput) { in.Command = "" }, "command"},
		"priority 0":         {func(in *SpecInput) { in.Priority = ptr(0) }, "priority"},
		"priority 11":        {func(in *SpecInput) { in.Priority = ptr(11) }, "priority"},
		"bad type":           {func(in *SpecInput) { in.Type = "docker" }, "type"},
		"env key":            {func(in *SpecInput) { in.Env = map[string]string{"1X": "y"} }, "env"},
		"oversized env":      {func(in *SpecInput) { in.Env = big }, "env"},
		"agent's env key":    {func(in *SpecInput) { in.Env = map[string]string{"X": "1", "TASKMESH_TASK_ID": "spoof"} }, "env"},
		"renew >= ttl":       {func(in *SpecInput) { in.LeaseTTL, in.RenewInterval = ptr(60), ptr(60) }, "renew_interval_sec"},
		"scatter no count":   {func(in *SpecInput) { in.Mode = ModeScatter }, "distribution.count"},
		"broadcast+mach":     {func(in *SpecInput) { in.Mode, in.MachineID = ModeBroadcast, "m" }, "distribution"},
		"bad mode":           {func(in *SpecInput) { in.Mode = "random" }, "distribution.mode"},
		"bad target ip":      {func(in *SpecInput) { in.TargetIPs = []string{"300.1.1.1"} }, "targets.ips"},
		"targets+machine":    {func(in *SpecInput) { in.TargetMachines, in.MachineID = []string{"a"}, "b" }, "targets"},
		"timeout 0":          {func(in *SpecInput) { in.Timeout = ptr(0) }, "timeout"},
		"relative workdir":   {func(in *SpecInput) { in.Workdir = "relative/dir" }, "workdir"},
		"workdir upward":     {func(in *SpecInput) { in.Workdir = "../../.." }, "workdir"},
		"workdir dot":        {func(in *SpecInput) { in.Workdir = "." }, "workdir"},
		"nul in arg":         {func(in *SpecInput) { in.Args = []string{"a\x00b"} }, "args"},
		"unclosed quote":     {func(in *SpecInput) { in.Command = `echo 'hi` }, "command"},
		"a pipe":             {func(in *SpecInput) { in.Command = "echo hi | wc -l" }, "command"},
		"two commands":       {func(in *SpecInput) { in.Command = "echo a\necho b" }, "command"},
		"blank line":         {func(in *SpecInput) { in.Command = "   " }, "command"},
		"bad quantity":       {func(in *SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "two"} }, "resources"},
		"exponent quantity":  {func(in *SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "1e308"} }, "resources"},
		"huge quantity":      {func(in *SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "99999999999999999999P"} }, "resources"},
		"bad resource":       {func(in *SpecInput) { in.Resources = map[string]string{"gpu count": "1"} }, "resources"},
		"bad quota":          {func(in *SpecInput) { in.Quota = "no spaces" }, "quota"},
		"video on shell":     {func(in *SpecInput) { in.Video = validVideo() }, "video"},
		"webhook scheme":     {func(in *SpecInput) { in.Webhook = "ftp://example.com/x" }, "webhook.url"},
		"webhook no host":    {func(in *SpecInput) { in.Webhook = "https:///x" }, "webhook.url"},
		"webhook relative":   {func(in *SpecInput) { in.Webhook = "/hooks" }, "webhook.url"},
		"webhook userinfo":   {func(in *SpecInput) { in.Webhook = "https://u:p@example.com/" }, "webhook.url"},
		"webhook nul":        {func(in *SpecInput) { in.Webhook = "https://example.com/\x00" }, "webhook.url"},
		"webhook octal host": {func(in *SpecInput) { in.Webhook = "http://012.0.0.1/x" }, "webhook.url"},
		"webhook too long":   {func(in *SpecInput) { in.Webhook = "https://example.com/" + strings.Repeat("a", 2048) }, "webhook.url"},
		"video missing":      {func(in *SpecInput) { in.Type = TypeVideo }, "video"},
		"video no prompt": {func(in *SpecInput) {
			in.Type, in.Video = TypeVideo, validVideo()
			in.Video.Prompt = ""
		}, "video.prompt"},
		"i2v no image": {func(in *SpecInput) {
			in.Type, in.Video = TypeVideo, validVideo()
			in.Video.Type = "image_to_video"
		}, "video.image_url"},
		"video bad size": {func(in *SpecInput) {
			in.Type, in.Video = TypeVideo, validVideo()
			in.Video.Width = 5000
		}, "video.width"},
	}
	for name, tt := range tests {
		in := SpecInput{Name: "n", Command: "c"}
		tt.mut(&in)
		_, err := NormalizeSpec(in)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != tt.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want invalid %s", name, err, tt.field)
		}
	}
	if s, err := NormalizeSpec(SpecInput{Name: "w", Command: "c", Webhook: " https://hooks.example.com/a?b=c "}); err != nil ||
		s.Webhook != "https://hooks.example.com/a?b=c" {
		t.Errorf("webhook = %q, %v", s.Webhook, err)
	}
	if s, err := NormalizeSpec(SpecInput{Name: "w", Command: "c", Workdir: "/data/run 1/../x"}); err != nil || s.Workdir != "/data/run 1/../x" {
		t.Errorf("absolute workdir = %q, %v", s.Workdir, err)
	}
	if _, err := NormalizeSpec(SpecInput{Name: "probe", Type: TypeNoop}); err != nil {
		t.Errorf("noop without command: %v", err)
	}
	v, err := NormalizeSpec(SpecInput{Name: "clip", Type: TypeVideo, Video: validVideo(),
		Resources: map[string]string{"nvidia.com/gpu": "2", "cpu": "500m", "memory": "4Gi"}, Quota: "gu-q1"})
	if err != nil || v.Video == nil || v.Resources["cpu"] != "500m" || v.Quota != "gu-q1" {
		t.Errorf("video without command = %+v, %v", v, err)
	}
}

// A shell or python task's command without args is a command line: it
// runs as its words. With args, or for a script, the command is kept as
// given.
// A task that sets only a short lease gets a renewal interval inside it, so
// that a lease of a few seconds can be asked for without also choosing how
// often it is renewed.
func TestNormalizeSpecFitsTheDefaultRenewalToTheLease(t *testing.T) {
	for ttl, want := range map[int]int{5: 1, 10: 2, 60: 12, 299: 59, 300: 60, 3600: 60} {
		s := spec(t, func(in *SpecInput) { in.LeaseTTL = ptr(ttl) })
		if s.LeaseTTL != ttl || s.RenewInterval != want {
			t.Errorf("lease_ttl_sec %d: renew_interval_sec %d, want %d", ttl, s.RenewInterval, want)
		}
	}
	// An interval the task sets is kept, and checked against the lease.
	if s := spec(t, func(in *SpecInput) { in.LeaseTTL, in.RenewInterval = ptr(10), ptr(9) }); s.RenewInterval != 9 {
		t.Errorf("renew_interval_sec = %d, want 9", s.RenewInterval)
	}
}

func TestNormalizeSpecReadsACommandLine(t *testing.T) {
	for _, tt := range []struct {
		in       SpecInput
		cmd      string
		wantArgs []string
	}{
		{SpecInput{Command: "python process.py --shard=1"}, "python", []string{"process.py", "--shard=1"}},
		{SpecInput{Type: TypePython, Command: `python -c 'print("a b")'`}, "python", []string{"-c", `print("a b")`}},
		{SpecInput{Command: "echo", Args: []string{"a b"}}, "echo", []string{"a b"}},
		{SpecInput{Command: "/opt/My App/run", Args: []string{"-v"}}, "/opt/My App/run", []string{"-v"}},
		{SpecInput{Type: TypeScript, Command: "echo a | wc -l"}, "echo a | wc -l", nil},
		{SpecInput{Command: "true"}, "true", nil},
	} {
		tt.in.Name = "n"
		s, err := NormalizeSpec(tt.in)
		if err != nil || s.Command != tt.cmd || !slices.Equal(s.Args, tt.wantArgs) {
			t.Errorf("NormalizeSpec(%q, %q) = %q %q, %v; want %q %q", tt.in.Command, tt.in.Args, s.Command, s.Args, err, tt.cmd, tt.wantArgs)
		}
	}
}

func validVideo() *Video {
	return &Video{Model: "wan2.2-t2v", Type: "text_to_video", Prompt: "a cat", Resolution: "480P",
		Width: 832, Height: 480, Duration: 5, FrameNum: 81, Seed: 7}
}

func TestHappyPathAndFencing(t *testing.T) {
	task := leased(t, nil)
	if task.Status != StatusAssigned || task.AttemptID != "att-1" || !task.LeaseExpiresAt.Equal(t0.Add(301*time.Second)) {
		t.Fatalf("leased = %+v", task)
	}
	now := t0.Add(2 * time.Second)
	// Another attempt is refused everywhere with 30001.
	if _, err := task.Start(now, "agent-1", "att-0"); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("start other attempt: %v", err)
	}
	if _, err := task.Start(now, "agent-2", "att-1"); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("start by other agent: %v", err)
	}
	recs, err := task.Start(now, "agent-1", "att-1")
	task = run(t, task, recs, err)
	if task.Status != StatusRunning {
		t.Fatalf("status = %s", task.Status)
	}
	// Start again: success, nothing recorded.
	if recs, err := task.Start(now, "agent-1", "att-1"); err != nil || len(recs) != 0 {
		t.Fatalf("repeated start = %v, %v", recs, err)
	}
	if _, err := task.ReportProgress(now, "agent-1", "old", 10, ""); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("progress from old attempt: %v", err)
	}
	recs, err = task.ReportProgress(now, "agent-1", "att-1", 40, "epoch 4")
	task = run(t, task, recs, err)
	recs, err = task.Renew(now.Add(time.Minute), "agent-1", "att-1", 120)
	task = run(t, task, recs, err)
	if !task.LeaseExpiresAt.Equal(now.Add(3 * time.Minute)) {
		t.Fatalf("renewed lease = %s", task.LeaseExpiresAt)
	}
	recs, _, err = task.Complete(now.Add(2*time.Minute), "agent-1", "att-1", Outcome{Result: &Result{StorageType: "db", Stdout: "ok"}})
	task = run(t, task, recs, err)
	if task.Status != StatusCompleted || *task.ExitCode != 0 || task.Progress != 100 || task.Result.Stdout != "ok" {
		t.Fatalf("completed = %+v", task)
	}
	// Complete again with the same attempt: success, nothing recorded.
	if recs, repeat, err := task.Complete(now.Add(3*time.Minute), "agent-1", "att-1", Outcome{ExitCode: 9}); err != nil || !repeat || len(recs) != 0 {
		t.Fatalf("repeated complete = %v, %v, %v", recs, repeat, err)
	}
	if _, _, err := task.Complete(now, "agent-1", "att-2", Outcome{}); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("foreign complete: %v", err)
	}
	if _, err := task.Renew(now, "agent-1", "att-1", 0); !errors.Is(err, ErrImmutable) {
		t.Fatalf("renew after completion: %v", err)
	}
	if task.Version != 6 {
		t.Fatalf("version = %d, want 6", task.Version)
	}
}

// An agent starts the process alongside StartTask, so a short task's end by
// the agent's clock can precede the start the server recorded; the task must
// still read as ending no earlier than it started (or was leased).
func TestCompleteNeverEndsBeforeTheAttemptBegan(t *testing.T) {
	task := leased(t, nil)
	start := t0.Add(2 * time.Second)
	recs, err := task.Start(start, "agent-1", "att-1")
	task = run(t, task, recs, err)
	recs, _, err = task.Complete(start.Add(time.Second), "agent-1", "att-1", Outcome{EndedAt: start.Add(-20 * time.Millisecond)})
	task = run(t, task, recs, err)
	if task.EndedAt.Before(task.StartedAt) || !task.EndedAt.Equal(start) {
		t.Fatalf("started_at %s, ended_at %s: want ended_at = started_at", task.StartedAt, task.EndedAt)
	}

	// Never started: not before the lease was handed out.
	task = leased(t, func(in *SpecInput) { in.MaxRetries = ptr(0) })
	recs, _, err = task.Complete(t0.Add(3*time.Second), "agent-1", "att-1", Outcome{ExitCode: 1, EndedAt: t0})
	task = run(t, task, recs, err)
	if !task.EndedAt.Equal(task.AssignedAt) {
		t.Fatalf("assigned_at %s, ended_at %s: want ended_at = assigned_at", task.AssignedAt, task.EndedAt)
	}
	if task.StartedAt.After(task.EndedAt) {
		t.Fatalf("started_at %s after ended_at %s", task.StartedAt, task.EndedAt)
	}
}

func TestExpiredLeaseAnswers410ButLateResultIsKept(t *testing.T) {
	task := leased(t, func(in *SpecInput) { in.LeaseTTL = ptr(30); in.RenewInterval = ptr(10) })
	late := t0.Add(time.Hour)
	if _, err := task.Renew(late, "agent-1", "att-1", 0); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("renew expired: %v", err)
	}
	if _, err := task.Start(late, "agent-1", "att-1"); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("start expired: %v", err)
	}
	recs, _, err := task.Complete(late, "agent-1", "att-1", Outcome{})
	if task = run(t, task, recs, err); task.Status != StatusCompleted {
		t.Fatalf("late result before the sweeper: %s", task.Status)
	}
}

func TestFailureRetriesThenFails(t *testing.T) {
	task := leased(t, func(in *SpecInput) { in.MaxRetries = ptr(1); in.RetryDelay = ptr(10) })
	now := t0.Add(5 * time.Second)
	recs, _, err := task.Complete(now, "agent-1", "att-1", Outcome{ExitCode: 2})
	if f, ok := recs[0].Event.(Failed); !ok || !f.RetryFollows || len(recs) != 2 {
		t.Fatalf("a failure with retries left = %+v, want Failed{RetryFollows} and RetryScheduled", recs)
	}
	task = run(t, task, recs, err)
	if task.Status != StatusPending || task.RetryCount != 1 || !task.RetryAt.Equal(now.Add(10*time.Second)) || task.Claimable(now) {
		t.Fatalf("after first failure = %+v", task)
	}
	// Pending reads as pending: nothing of the failed attempt shows.
	wantNoAttempt := func(what string, task Task) {
		t.Helper()
		if task.AttemptID != "" || task.AgentID != "" || !task.AssignedAt.IsZero() || !task.StartedAt.IsZero() ||
			!task.EndedAt.IsZero() || !task.LeaseExpiresAt.IsZero() || !task.LastHeartbeatAt.IsZero() || task.Progress != 0 ||
			task.ExitCode != nil || task.Error != "" || task.Result != nil {
			t.Fatalf("%s: pending with an attempt's fields: %+v", what, task)
		}
	}
	wantNoAttempt("a retry scheduled", task)
	if _, err := task.Renew(now, "agent-1", "att-1", 0); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("renew by the failed attempt: %v", err)
	}
	if _, err := task.Lease(now, "att-2", "agent-1", "m", ""); !errors.Is(err, ErrImmutable) {
		t.Fatalf("leased before retry_delay: %v", err)
	}
	// The failed attempt repeating its complete still gets success.
	if _, repeat, err := task.Complete(now, "agent-1", "att-1", Outcome{ExitCode: 2}); !repeat || err != nil {
		t.Fatalf("repeat after retry scheduled: %v %v", repeat, err)
	}
	later := now.Add(10 * time.Second)
	recs, err = task.Lease(later, "att-2", "agent-2", "m2", "")
	task = run(t, task, recs, err)
	recs, _, err = task.Complete(later, "agent-2", "att-2", Outcome{ExitCode: 1, Error: "timeout after 5s", Reason: ReasonTimeout})
	if f, ok := recs[0].Event.(Failed); !ok || f.RetryFollows || len(recs) != 1 {
		t.Fatalf("the last failure = %+v, want Failed without RetryFollows alone", recs)
	}
	task = run(t, task, recs, err)
	if task.Status != StatusFailed || task.Error != "timeout after 5s" || *task.ExitCode != 1 {
		t.Fatalf("after retries = %+v", task)
	}
	recs, err = task.Retry(later, "user")
	if task = run(t, task, recs, err); task.Status != StatusPending || !task.Claimable(later) {
		t.Fatalf("manual retry = %+v", task)
	}
	wantNoAttempt("a manual retry", task)
}

func TestLeaseExpiryRequeuesOrFails(t *testing.T) {
	tests := []struct {
		name       string
		retries    int
		reason     string
		started    bool
		wantStatus Status
		wantCount  int
	}{
		{"running, retries left", 2, ReasonAgentLost, true, StatusPending, 1},
		{"running, exhausted", 0, ReasonAgentLost, true, StatusFailed, 0},
		{"lease ran out while running", 2, ReasonLeaseExpired, true, StatusPending, 1},
		{"lease ran out while running, exhausted", 0, ReasonLeaseExpired, true, StatusFailed, 0},
		// Nothing of it ran: a task its agent never started goes back
		// (assigned → pending) without using a retry, even when none is
		// left, whether its lease ran out or its agent was lost.
		{"lease ran out, never started", 2, ReasonLeaseExpired, false, StatusPending, 0},
		{"lease ran out, never started, no retries", 0, ReasonLeaseExpired, false, StatusPending, 0},
		{"agent lost, never started", 2, ReasonAgentLost, false, StatusPending, 0},
		{"agent lost, never started, no retries", 0, ReasonAgentLost, false, StatusPending, 0},
	}
	for _, tt := range tests {
		task := leased(t, func(in *SpecInput) { in.MaxRetries = ptr(tt.retries) })
		if tt.started {
			recs, err := task.Start(t0.Add(2*time.Second), "agent-1", "att-1")
			task = run(t, task, recs, err)
		}
		recs, err := task.ExpireLease(t0.Add(time.Hour), tt.reason)
		task = run(t, task, recs, err)
		if task.Status != tt.wantStatus || task.RetryCount != tt.wantCount {
			t.Errorf("%s: status %s, retry_count %d; want %s, %d", tt.name, task.Status, task.RetryCount, tt.wantStatus, tt.wantCount)
		}
		if tt.wantStatus == StatusPending && (task.AttemptID != "" || !task.LastHeartbeatAt.IsZero() || !task.Claimable(t0.Add(time.Hour))) {
			t.Errorf("%s: not claimable again, or with the lost attempt's fields: %+v", tt.name, task)
		}
		// The lost attempt's late complete is rejected.
		if _, _, err := task.Complete(t0.Add(2*time.Hour), "agent-1", "att-1", Outcome{}); err == nil {
			t.Errorf("%s: stale complete accepted", tt.name)
		}
	}
}

// An attempt its agent reports preempted (by the system it runs work
// through) ends as Taskmesh's own preemptions end, preempted then
// requeued, in one command and without using a retry: a task with no
// retry left is requeued all the same.
func TestCompletePreemptedRequeuesWithoutARetry(t *testing.T) {
	for _, retries := range []int{0, 2} {
		task := leased(t, func(in *SpecInput) { in.MaxRetries = ptr(retries); in.RetryDelay = ptr(60) })
		recs, err := task.Start(t0.Add(2*time.Second), "agent-1", "att-1")
		task = run(t, task, recs, err)
		now := t0.Add(time.Minute)
		recs, repeat, err := task.Complete(now, "agent-1", "att-1", Outcome{ExitCode: -1, PreemptedBy: "slurm",
			Error: "slurm: job 7 PREEMPTED", Result: &Result{StorageType: "db", Stdout: "partial"}})
		if err != nil || repeat || len(recs) != 2 {
			t.Fatalf("max_retries %d: complete preempted = %+v %v %v", retries, recs, repeat, err)
		}
		p, ok := recs[0].Event.(Preempted)
		q, ok2 := recs[1].Event.(Requeued)
		if !ok || !ok2 || p != (Preempted{AttemptID: "att-1", MachineID: "m-1", By: "slurm", Reason: "slurm: job 7 PREEMPTED"}) ||
			q.From != string(StatusPreempted) || recs[0].Actor != "agent:agent-1" {
			t.Fatalf("max_retries %d: records %+v", retries, recs)
		}
		task = run(t, task, recs, err)
		if task.Status != StatusPending || task.RetryCount != 0 || task.AttemptID != "" || task.PreemptedBy != "" ||
			task.Result != nil || task.Error != "" || !task.Claimable(now) {
			t.Fatalf("max_retries %d: after preempted = %+v", retries, task)
		}
		// The report repeated after a lost answer succeeds without a record,
		// even once the task has a new attempt; another agent's is refused.
		if recs, repeat, err := task.Complete(now, "agent-1", "att-1", Outcome{PreemptedBy: "slurm"}); err != nil || !repeat || recs != nil {
			t.Fatalf("repeat = %+v %v %v", recs, repeat, err)
		}
		recs, err = task.Lease(now, "att-2", "agent-1", "m-1", "")
		task = run(t, task, recs, err)
		if _, repeat, err := task.Complete(now, "agent-1", "att-1", Outcome{PreemptedBy: "slurm"}); err != nil || !repeat {
			t.Fatalf("repeat after a new lease = %v %v", repeat, err)
		}
		if _, _, err := task.Complete(now, "agent-2", "att-1", Outcome{PreemptedBy: "slurm"}); !errors.Is(err, ErrAttemptMismatch) {
			t.Fatalf("another agent's repeat: %v", err)
		}
		// The attempt's ordinary outcome, late, is not a repeat: it is refused.
		if _, _, err := task.Complete(now, "agent-1", "att-1", Outcome{}); !errors.Is(err, ErrAttemptMismatch) {
			t.Fatalf("late success of the preempted attempt: %v", err)
		}
	}
}

// Preempted is refused like any outcome for an attempt that is not the
// current one (30001, before anything else), and for a task that is not
// leased (30002).
func TestCompletePreemptedIsFenced(t *testing.T) {
	task := leased(t, nil)
	for _, attempt := range []string{"att-0", ""} {
		if _, _, err := task.Complete(t0, "agent-1", attempt, Outcome{PreemptedBy: "slurm"}); !errors.Is(err, ErrAttemptMismatch) {
			t.Fatalf("attempt %q: %v", attempt, err)
		}
	}
	if _, _, err := task.Complete(t0, "agent-2", "att-1", Outcome{PreemptedBy: "slurm"}); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("another agent: %v", err)
	}
	// A failed attempt that was retried is not taken for a preempted one.
	failed := leased(t, nil)
	recs, _, err := failed.Complete(t0, "agent-1", "att-1", Outcome{ExitCode: 1})
	failed = run(t, failed, recs, err)
	recs, err = failed.Lease(t0.Add(time.Hour), "att-2", "agent-1", "m-1", "")
	failed = run(t, failed, recs, err)
	if _, _, err := failed.Complete(t0.Add(time.Hour), "agent-1", "att-2-not", Outcome{PreemptedBy: "slurm"}); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("unknown attempt: %v", err)
	}
	recs, err = task.Cancel(t0, "user", "")
	c := run(t, task, recs, err)
	if _, _, err := c.Complete(t0, "agent-1", "att-1", Outcome{PreemptedBy: "slurm"}); !errors.Is(err, ErrImmutable) {
		t.Fatalf("preempted after cancel: %v", err)
	}
}

func TestCancelPreemptSuspendDelete(t *testing.T) {
	task := leased(t, nil)
	recs, err := task.Cancel(t0, "user", "not needed")
	c := run(t, task, recs, err)
	if c.Status != StatusCancelled {
		t.Fatalf("cancel: %s", c.Status)
	}
	if stop, why := c.MustStop("att-1"); !stop || why != "cancelled" {
		t.Fatalf("must stop = %v %s", stop, why)
	}
	if _, err := c.Cancel(t0, "user", ""); !errors.Is(err, ErrImmutable) {
		t.Fatalf("cancel twice: %v", err)
	}
	if _, _, err := c.Complete(t0, "agent-1", "att-1", Outcome{}); !errors.Is(err, ErrImmutable) {
		t.Fatalf("complete after cancel: %v", err)
	}
	// Deleting a leased task cancels it in the same decision.
	recs, err = task.Delete(t0, "user")
	if d := run(t, task, recs, err); !d.Deleted || d.Status != StatusCancelled || d.Error != "cancelled: deleted" {
		t.Fatalf("delete while assigned: %s, deleted %v, error %q", d.Status, d.Deleted, d.Error)
	} else if stop, why := d.MustStop("att-1"); !stop || why != "deleted" {
		t.Fatalf("must stop after delete = %v %s", stop, why)
	}
	recs, err = c.Delete(t0, "user")
	if c = run(t, c, recs, err); !c.Deleted {
		t.Fatal("not deleted")
	}

	recs, err = task.Preempt(t0, "urgent-task", "priority")
	p := run(t, task, recs, err)
	if p.Status != StatusPreempted || p.PreemptedBy != "urgent-task" {
		t.Fatalf("preempted = %+v", p)
	}
	if stop, why := p.MustStop("att-1"); !stop || why != "preempted" {
		t.Fatalf("must stop = %v %s", stop, why)
	}
	recs, err = p.Requeue(t0, "scheduler", "preemptor finished")
	if p = run(t, p, recs, err); p.Status != StatusPending || p.AttemptID != "" || !p.LastHeartbeatAt.IsZero() {
		t.Fatalf("requeued = %+v", p)
	}

	recs, err = task.Suspend(t0, "user", "maintenance")
	s := run(t, task, recs, err)
	recs, err = s.Requeue(t0, "user", "resume")
	if s = run(t, s, recs, err); s.Status != StatusPending {
		t.Fatalf("resumed = %s", s.Status)
	}
	if _, err := submitted(t, nil).Update(t0, "user", spec(t, nil), ""); err != nil {
		t.Fatalf("update pending: %v", err)
	}
	if _, err := task.Update(t0, "user", spec(t, nil), ""); !errors.Is(err, ErrImmutable) {
		t.Fatalf("update assigned: %v", err)
	}
}

func TestServerSideTimeout(t *testing.T) {
	task := leased(t, func(in *SpecInput) { in.Timeout = ptr(60); in.GracePeriod = ptr(10); in.MaxRetries = ptr(0) })
	recs, err := task.Start(t0.Add(2*time.Second), "agent-1", "att-1")
	task = run(t, task, recs, err)
	if task.TimedOut(t0.Add(70*time.Second), 5*time.Second) {
		t.Fatal("timed out within timeout + grace + slack")
	}
	if !task.TimedOut(t0.Add(80*time.Second), 5*time.Second) {
		t.Fatal("not timed out after timeout + grace + slack")
	}
	recs, err = task.TimeOut(t0.Add(80 * time.Second))
	if task = run(t, task, recs, err); task.Status != StatusFailed || task.Error != "timeout after 60s" {
		t.Fatalf("timed out = %+v", task)
	}
}

func TestMatchesHardConstraints(t *testing.T) {
	task := submitted(t, func(in *SpecInput) { in.Labels = []string{"gpu:a100", "region:us-east"}; in.MachineID = "m1" })
	tests := []struct {
		machine string
		labels  []string
		types   []string
		want    bool
	}{
		{"m1", []string{"gpu:a100", "region:us-east", "x"}, nil, true},
		{"m1", []string{"gpu:a100"}, nil, false},
		{"m2", []string{"gpu:a100", "region:us-east"}, nil, false},
		{"m1", []string{"gpu:a100", "region:us-east"}, []string{"noop"}, false},
	}
	for _, tt := range tests {
		if got := task.Matches(tt.machine, "", tt.labels, tt.types); got != tt.want {
			t.Errorf("Matches(%s, %v, %v) = %v", tt.machine, tt.labels, tt.types, got)
		}
	}
}

func TestExpireCancelsLiveTasksAndRemovesEveryTask(t *testing.T) {
	done := run(t, leased(t, nil), nil, nil)
	recs, _, err := done.Complete(t0.Add(2*time.Second), "agent-1", "att-1", Outcome{})
	done = run(t, done, recs, err)
	tests := map[string]struct {
		task   Task
		events []string
	}{
		"pending":   {submitted(t, nil), []string{"TaskCanceled", "TaskExpired"}},
		"leased":    {leased(t, nil), []string{"TaskCanceled", "TaskExpired"}},
		"completed": {done, []string{"TaskExpired"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			recs, err := tc.task.Expire(t0.Add(time.Hour), "scheduler")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range recs {
				names = append(names, r.Event.EventName())
			}
			if strings.Join(names, ",") != strings.Join(tc.events, ",") {
				t.Fatalf("events = %v, want %v", names, tc.events)
			}
			after := run(t, tc.task, recs, nil)
			if !after.Deleted || !after.Status.Final() {
				t.Fatalf("after expiry: deleted %v, status %s", after.Deleted, after.Status)
			}
			if stop, why := after.MustStop(tc.task.AttemptID); !stop || why != "deleted" {
				t.Errorf("MustStop = %v %q, want the attempt stopped", stop, why)
			}
			if _, err := after.Expire(t0.Add(2*time.Hour), "scheduler"); !errors.Is(err, ErrImmutable) {
				t.Errorf("expiring twice: %v, want ErrImmutable", err)
			}
		})
	}
}

type unknownEvent struct{}

func (unknownEvent) EventName() string { return "TaskUnknown" }

// Apply reports an event it has no case for (the lifecycle-coverage tests
// rely on it) and still counts its version.
func TestHandles(t *testing.T) {
	if !Handles(Deleted{}) || !Handles(Submitted{}) {
		t.Error("Handles is false for events Apply folds")
	}
	if Handles(unknownEvent{}) {
		t.Error("Handles is true for an event Apply has no case for")
	}
	task := Apply(Task{Version: 4, Status: StatusRunning}, Record{Event: unknownEvent{}, At: t0})
	if task.Version != 5 || !task.UpdatedAt.Equal(t0) || task.Status != StatusRunning {
		t.Errorf("unknown event folded into %+v", task)
	}
}

func TestStatuses(t *testing.T) {
	seen := map[Status]bool{}
	var final []Status
	for _, s := range Statuses() {
		if seen[s] || s == "" {
			t.Errorf("status %q listed twice or empty", s)
		}
		seen[s] = true
		if s.Final() {
			final = append(final, s)
		}
	}
	if len(seen) != 8 || !slices.Equal(final, []Status{StatusCompleted, StatusFailed, StatusCancelled}) {
		t.Errorf("statuses %v, final %v", Statuses(), final)
	}
}

// An attempt cancelled on its agent's machine ends the task cancelled, as
// CancelTask does: no retry is used although retries remain, its output
// is not the task's, and its repeated report is answered as a repeat.
func TestAttemptCancelledOnItsAgentCancelsTheTask(t *testing.T) {
	task := leased(t, func(in *SpecInput) { in.MaxRetries = ptr(3) })
	recs, err := task.Start(t0.Add(2*time.Second), "agent-1", "att-1")
	task = run(t, task, recs, err)
	now := t0.Add(5 * time.Second)
	if _, _, err := task.Complete(now, "agent-1", "att-1", Outcome{Cancelled: true, PreemptedBy: "slurm"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cancelled and preempted at once: %v", err)
	}
	if _, _, err := task.Complete(now, "agent-1", "att-0", Outcome{Cancelled: true}); !errors.Is(err, ErrAttemptMismatch) {
		t.Fatalf("another attempt cancelling: %v", err)
	}
	recs, repeat, err := task.Complete(now, "agent-1", "att-1", Outcome{Cancelled: true, ExitCode: 143,
		Error: "through the agent-local API", Result: &Result{StorageType: "db", Stdout: "partial"}})
	if c, ok := recs[0].Event.(Canceled); repeat || len(recs) != 1 || !ok || c.AttemptID != "att-1" || recs[0].Actor != AgentActor("agent-1") {
		t.Fatalf("records = %+v, %v", recs, repeat)
	}
	task = run(t, task, recs, err)
	if task.Status != StatusCancelled || task.RetryCount != 0 || task.Error != "cancelled: through the agent-local API" || task.Result != nil {
		t.Fatalf("after the cancel on the agent = %+v", task)
	}
	if stop, why := task.MustStop("att-1"); !stop || why != "cancelled" {
		t.Fatalf("MustStop = %v %q", stop, why)
	}
	if recs, repeat, err := task.Complete(now.Add(time.Second), "agent-1", "att-1", Outcome{Cancelled: true}); !repeat || err != nil || len(recs) != 0 {
		t.Fatalf("the report repeated = %v %v %v", recs, repeat, err)
	}
	if _, _, err := task.Complete(now.Add(time.Second), "agent-1", "att-1", Outcome{ExitCode: 0}); !errors.Is(err, ErrImmutable) {
		t.Fatalf("a completion after the cancel: %v", err)
	}
}
