package app_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestCompleteRecordsTheOutcomeOnce(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a"))
	h.clock.Advance(3 * time.Second)
	in := app.Completion{AgentID: "a1", AttemptID: x.AttemptID, ExitCode: 0, Stdout: "hello\n"}
	done, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, in)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != domain.StatusCompleted || done.ExitCode == nil || *done.ExitCode != 0 || done.Result == nil ||
		done.Result.StorageType != "db" || done.Result.Stdout != "hello\n" || !done.EndedAt.Equal(h.clock.Now()) {
		t.Errorf("completed %+v (result %+v)", done, done.Result)
	}
	again, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, in)
	if err != nil || again.Version != done.Version || again.FinishedAttemptID != x.AttemptID {
		t.Errorf("a repeated complete = %+v, %v; want the same answer, nothing recorded", again, err)
	}
}

func TestCompleteWithAFailureSchedulesARetry(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a", func(in *domain.SpecInput) { in.RetryDelay, in.MaxRetries = intp(60), intp(1) }))
	got, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID, ExitCode: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.StatusPending || got.RetryCount != 1 || !got.RetryAt.Equal(h.clock.Now().Add(time.Minute)) {
		t.Errorf("after a failed attempt: %+v", got)
	}
	if names := h.eventNames(x.ID); !strings.HasSuffix(names, "TaskFailed TaskRetryScheduled]") {
		t.Errorf("events = %s", names)
	}
	if got := h.claim("a1", "m1", 1); len(got) != 0 {
		t.Error("a task waiting for its retry_delay was claimed")
	}
	h.clock.Advance(time.Minute)
	y := h.claimOne("a1", "m1", x.ID)
	if _, err := h.app.StartTask(h.ctx, agent("a1"), y.ID, "a1", y.AttemptID); err != nil {
		t.Fatal(err)
	}
	got, err = h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: y.AttemptID, Error: "killed"})
	if err != nil || got.Status != domain.StatusFailed || got.Error != "killed" {
		t.Errorf("the last retry failing = %+v, %v; want failed for good", got, err)
	}
}

// An attempt its agent reports preempted (Slurm took the job away) is
// preempted and requeued in one change, without a retry and without
// waiting for retry_delay: a task with max_retries 0 runs again and
// completes. Its output is not kept; the repeated report is answered
// without a record.
func TestCompletePreemptedRequeuesWithoutARetry(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a", func(in *domain.SpecInput) { in.RetryDelay, in.MaxRetries = intp(60), intp(0) }))
	in := app.Completion{AgentID: "a1", AttemptID: x.AttemptID, ExitCode: -1, Stdout: "partial",
		Error: "slurm: job 7 PREEMPTED", PreemptedBy: "slurm", Object: &app.ResultObject{Key: "never-uploaded", Size: 1}}
	got, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.StatusPending || got.RetryCount != 0 || got.AttemptID != "" || got.Result != nil || got.Error != "" {
		t.Errorf("after a preempted attempt: %+v", got)
	}
	if names := h.eventNames(x.ID); !strings.HasSuffix(names, "TaskStarted TaskPreempted TaskRequeued]") {
		t.Errorf("events = %s", names)
	}
	evs := h.store.Events(x.ID)
	if p, ok := evs[len(evs)-2].Event.(domain.Preempted); !ok || p.By != "slurm" || p.AttemptID != x.AttemptID ||
		p.Reason != "slurm: job 7 PREEMPTED" || evs[len(evs)-2].Actor != "agent:a1" {
		t.Errorf("preempted event = %+v by %s", evs[len(evs)-2].Event, evs[len(evs)-2].Actor)
	}
	again, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, in)
	if err != nil || again.Version != got.Version {
		t.Errorf("a repeated report = %+v, %v; want the task as it is, nothing recorded", again, err)
	}
	// Claimable at once: no retry_delay.
	y := h.claimOne("a2", "m2", x.ID)
	if _, err := h.app.StartTask(h.ctx, agent("a2"), y.ID, "a2", y.AttemptID); err != nil {
		t.Fatal(err)
	}
	done, err := h.app.CompleteTask(h.ctx, agent("a2"), x.ID, app.Completion{AgentID: "a2", AttemptID: y.AttemptID})
	if err != nil || done.Status != domain.StatusCompleted || done.RetryCount != 0 {
		t.Errorf("the requeued task = %+v, %v; want completed with retry_count 0", done, err)
	}
}

// Preempted for an attempt that is not the task's current one is 30001
// and changes nothing; so is one for an attempt that failed.
func TestCompletePreemptedForAnotherAttemptIsRefused(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a", func(in *domain.SpecInput) { in.RetryDelay, in.MaxRetries = intp(0), intp(1) }))
	before := h.get(x.ID)
	_, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: "att-never-issued", PreemptedBy: "slurm"})
	wantErr(t, "an attempt never issued", err, domain.ErrAttemptMismatch)
	if after := h.get(x.ID); after.Version != before.Version || after.Status != domain.StatusRunning {
		t.Errorf("the refused report changed the task: %+v", after)
	}
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID, ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	y := h.claimOne("a1", "m1", x.ID)
	_, err = h.app.CompleteTask(h.ctx, agent("a2"), x.ID, app.Completion{AgentID: "a2", AttemptID: y.AttemptID, PreemptedBy: "slurm"})
	wantErr(t, "another agent's report", err, domain.ErrAttemptMismatch)
	if after := h.get(x.ID); after.Status != domain.StatusAssigned || after.AttemptID != y.AttemptID {
		t.Errorf("the refused report changed the task: %+v", after)
	}
}

// upload stores body as the result object of the current attempt of x.
func (h *harness) upload(x domain.Task, body string) app.ResultObject {
	h.t.Helper()
	sum := sha256.Sum256([]byte(body))
	digest := hex.EncodeToString(sum[:])
	up, err := h.app.CreateResultUpload(h.ctx, agent(x.AgentID), x.ID, x.AgentID, x.AttemptID, int64(len(body)), "", digest)
	if err != nil {
		h.t.Fatal(err)
	}
	// The link takes only the body whose sha256 the agent gave
	// (objectstore.Store.PresignPut).
	if !strings.Contains(up.URL, "X-SHA256="+digest) {
		h.t.Fatalf("upload link %s is not bound to the body's sha256", up.URL)
	}
	if _, err := h.objects.Put(h.ctx, up.Key, strings.NewReader(body), int64(len(body)), "application/json"); err != nil {
		h.t.Fatal(err)
	}
	return app.ResultObject{Key: up.Key, Size: int64(len(body)), SHA256: digest}
}

func TestCompleteWithAResultObject(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a"))
	up, err := h.app.CreateResultUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 10, "", "")
	if err != nil {
		t.Fatal(err)
	}
	wantKey := "results/t1/" + x.ID + "/" + x.AttemptID + ".json"
	if up.Key != wantKey || up.URL == "" || !up.ExpiresAt.Equal(h.clock.Now().Add(time.Hour)) {
		t.Errorf("upload = %+v, want key %s", up, wantKey)
	}
	obj := h.upload(x, `{"ok":true}`)
	bad := []struct {
		name, field string
		obj         app.ResultObject
	}{
		{"another key", "result_object.key", app.ResultObject{Key: "results/t1/" + x.ID + "/other.json", Size: obj.Size}},
		{"another size", "result_object", app.ResultObject{Key: obj.Key, Size: obj.Size + 1}},
		{"another checksum", "result_object", app.ResultObject{Key: obj.Key, Size: obj.Size, SHA256: strings.Repeat("0", 64)}},
	}
	for _, b := range bad {
		_, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID, Object: &b.obj})
		wantInvalid(t, b.name, err, b.field)
	}
	h.wantStatus(x.ID, domain.StatusRunning)
	done, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID, Object: &obj})
	if err != nil {
		t.Fatal(err)
	}
	if r := done.Result; r == nil || r.StorageType != "s3" || r.ObjectKey != obj.Key || r.SizeBytes != obj.Size || r.SHA256 != obj.SHA256 {
		t.Errorf("result = %+v", done.Result)
	}
	res, err := h.app.GetResult(h.ctx, user("t1"), x.ID)
	if err != nil || res.PresignedURL == "" || res.ExpiresIn != time.Hour || res.Task.ID != x.ID {
		t.Errorf("result = %+v, %v", res, err)
	}
}

func TestCompleteWithAResultObjectNeverUploaded(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a"))
	key := "results/t1/" + x.ID + "/" + x.AttemptID + ".json"
	_, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID,
		Object: &app.ResultObject{Key: key, Size: 3}})
	wantInvalid(t, "an object that was not uploaded", err, "result_object")
}

func TestResultUploadIsForTheCurrentAttempt(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("v", func(in *domain.SpecInput) {
		in.Type, in.Command = domain.TypeVideo, ""
		in.Video = &domain.Video{Model: "m", Type: "text_to_video", Prompt: "p", Width: 832, Height: 480, Duration: 5, FrameNum: 81}
	}))
	up, err := h.app.CreateResultUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 10, "", "")
	if err != nil || !strings.HasSuffix(up.Key, x.AttemptID+".mp4") {
		t.Errorf("a video's upload = %+v, %v; want an .mp4 key", up, err)
	}
	_, err = h.app.CreateResultUpload(h.ctx, agent("a1"), x.ID, "a1", "other-attempt", 10, "", "")
	wantErr(t, "upload for another attempt", err, domain.ErrAttemptMismatch)
	_, err = h.app.CreateResultUpload(h.ctx, agent("a2"), x.ID, "a1", x.AttemptID, 10, "", "")
	wantErr(t, "upload with another agent's token", err, app.ErrForbidden)
	if _, err := h.app.CancelTask(h.ctx, user("t1"), x.ID, ""); err != nil {
		t.Fatal(err)
	}
	_, err = h.app.CreateResultUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 10, "", "")
	wantErr(t, "upload for a cancelled task", err, domain.ErrImmutable)
}

func TestResultsWithoutAnObjectStore(t *testing.T) {
	h := newHarness(t)
	h.app = app.New(h.store.Stores(), nil, h.clock.Now, h.hub, app.Config{}, nil)
	x := h.running("a1", "m1", spec("a"))
	_, err := h.app.CreateResultUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 10, "", "")
	wantInvalid(t, "upload without an object store", err, "result")
	key := "results/t1/" + x.ID + "/" + x.AttemptID + ".json"
	_, err = h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID,
		Object: &app.ResultObject{Key: key, Size: 3}})
	wantInvalid(t, "result object without an object store", err, "result_object")
}

func TestGetResultOfATaskWithoutOutcome(t *testing.T) {
	h := newHarness(t)
	x := h.create(user("t1"), spec("a"))
	res, err := h.app.GetResult(h.ctx, user("t1"), x.ID)
	if err != nil || res.Task.Status != domain.StatusPending || res.PresignedURL != "" {
		t.Errorf("result of a pending task = %+v, %v", res, err)
	}
	_, err = h.app.GetResult(h.ctx, user("t2"), x.ID)
	wantErr(t, "another tenant's result", err, domain.ErrNotFound)
}

// Output reported inline that is 64 KiB or more is stored in the object
// store as the attempt's result (the whole output, as JSON), and the task
// keeps each stream's last 32 KiB; less stays with the task. Another
// attempt's report stores nothing.
func TestLargeInlineOutputGoesToTheObjectStore(t *testing.T) {
	h := newHarness(t)
	small := h.running("a1", "m1", spec("small"))
	justUnder := strings.Repeat("x", domain.InlineResultLimit-1)
	done, err := h.app.CompleteTask(h.ctx, agent("a1"), small.ID, app.Completion{AgentID: "a1", AttemptID: small.AttemptID, Stdout: justUnder})
	if err != nil || done.Result == nil || done.Result.StorageType != "db" || done.Result.Stdout != justUnder {
		t.Fatalf("65535 bytes: %v, %+v", err, done.Result)
	}

	large := h.running("a1", "m1", spec("large"))
	stdout := strings.Repeat("a", domain.InlineResultLimit-3) + "end" // exactly 64 KiB
	stderr := "日本語" + strings.Repeat("e", 40<<10)
	stale := app.Completion{AgentID: "a1", AttemptID: "not-the-attempt", Stdout: stdout}
	_, err = h.app.CompleteTask(h.ctx, agent("a1"), large.ID, stale)
	wantErr(t, "another attempt's large output", err, domain.ErrAttemptMismatch)
	if _, err := h.objects.Stat(h.ctx, "results/t1/"+large.ID+"/not-the-attempt.json"); err == nil {
		t.Errorf("another attempt's output was stored")
	}
	done, err = h.app.CompleteTask(h.ctx, agent("a1"), large.ID, app.Completion{AgentID: "a1", AttemptID: large.AttemptID, Stdout: stdout, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	r := done.Result
	if r == nil || r.StorageType != "s3" || r.ObjectKey != "results/t1/"+large.ID+"/"+large.AttemptID+".json" || r.SizeBytes == 0 || r.SHA256 == "" {
		t.Fatalf("64 KiB: result = %+v", r)
	}
	if len(r.Stdout) != domain.InlineTail || !strings.HasSuffix(r.Stdout, "end") || len(r.Stderr) > domain.InlineTail || !strings.HasSuffix(stderr, r.Stderr) {
		t.Errorf("inline tails: %d bytes of stdout, %d of stderr", len(r.Stdout), len(r.Stderr))
	}
	rc, _, err := h.objects.Open(h.ctx, r.ObjectKey)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var stored struct{ Stdout, Stderr string }
	if err := json.NewDecoder(rc).Decode(&stored); err != nil || stored.Stdout != stdout || stored.Stderr != stderr {
		t.Errorf("stored output: %v; %d and %d bytes", err, len(stored.Stdout), len(stored.Stderr))
	}
	if res, err := h.app.GetResult(h.ctx, user("t1"), large.ID); err != nil || res.PresignedURL == "" {
		t.Errorf("result link: %+v, %v", res, err)
	}
}

// Without an object store, large inline output is refused, naming stdout,
// and the attempt is still running.
func TestLargeInlineOutputWithoutAnObjectStore(t *testing.T) {
	h := newHarness(t)
	h.app = app.New(h.store.Stores(), nil, h.clock.Now, h.hub, app.Config{}, nil)
	x := h.running("a1", "m1", spec("a"))
	_, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID,
		Stdout: strings.Repeat("x", domain.InlineResultLimit)})
	wantInvalid(t, "large output without an object store", err, "stdout")
	h.wantStatus(x.ID, domain.StatusRunning)
}

// A repeated report is answered as the first one was, however the task
// moved on since: a failed attempt's repeat, after the retry was leased to
// another agent, is a repeat (not 30001) and answers failed; a preempted
// attempt's repeat answers pending, never the new lease's status under the
// old attempt's id. Nothing is recorded by either.
func TestARepeatedReportIsAnsweredAsTheFirstAfterTheTaskMovedOn(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a", func(in *domain.SpecInput) { in.RetryDelay, in.MaxRetries = intp(0), intp(5) }))
	failed := app.Completion{AgentID: "a1", AttemptID: x.AttemptID, ExitCode: 1}
	first, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, failed)
	if err != nil {
		t.Fatal(err)
	}
	if st, ended := first.OutcomeOf(x.AttemptID); st != domain.StatusFailed || ended.IsZero() {
		t.Fatalf("first answer %s at %v, want failed with its end", st, ended)
	}
	// Pending for its retry: the repeat answers failed, as the first did.
	again, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, failed)
	if st, _ := again.OutcomeOf(x.AttemptID); err != nil || again.Version != first.Version || st != domain.StatusFailed {
		t.Fatalf("a repeat while pending = %s, %+v, %v", st, again, err)
	}
	// Leased to another agent: still a repeat.
	y := h.claimOne("a2", "m1", x.ID)
	again, err = h.app.CompleteTask(h.ctx, agent("a1"), x.ID, failed)
	if st, _ := again.OutcomeOf(x.AttemptID); err != nil || again.Version != y.Version || st != domain.StatusFailed {
		t.Fatalf("a repeat after another agent's lease = %s, %+v, %v; want failed, nothing recorded", st, again, err)
	}
	// Another agent naming the failed attempt is not its repeat.
	_, err = h.app.CompleteTask(h.ctx, agent("a3"), x.ID, app.Completion{AgentID: "a3", AttemptID: x.AttemptID, ExitCode: 1})
	wantErr(t, "another agent repeating a1's report", err, domain.ErrAttemptMismatch)

	// a2's attempt is preempted by Slurm and requeued, then leased again.
	if _, err := h.app.StartTask(h.ctx, agent("a2"), x.ID, "a2", y.AttemptID); err != nil {
		t.Fatal(err)
	}
	preempted := app.Completion{AgentID: "a2", AttemptID: y.AttemptID, PreemptedBy: "slurm", Error: "taken"}
	first, err = h.app.CompleteTask(h.ctx, agent("a2"), x.ID, preempted)
	if st, ended := first.OutcomeOf(y.AttemptID); err != nil || st != domain.StatusPending || !ended.IsZero() {
		t.Fatalf("a preempted report = %s at %v, %v; want pending", st, ended, err)
	}
	z := h.claimOne("a1", "m1", x.ID)
	again, err = h.app.CompleteTask(h.ctx, agent("a2"), x.ID, preempted)
	if st, ended := again.OutcomeOf(y.AttemptID); err != nil || again.Version != z.Version || st != domain.StatusPending || !ended.IsZero() {
		t.Fatalf("a repeated preempted report after a new lease = %s at %v, %+v, %v; want pending", st, ended, again, err)
	}
	// The current attempt is answered as the task is.
	if st, _ := again.OutcomeOf(z.AttemptID); st != domain.StatusAssigned {
		t.Fatalf("the current attempt's outcome = %s, want assigned", st)
	}
}
