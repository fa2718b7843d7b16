package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/services/executor/internal/leaseconn"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// world is a fake lease server, a fake cluster and a backend between them.
type world struct {
	t       *testing.T
	fake    *leasetest.Fake
	cluster *dynamicfake.FakeDynamicClient
	logs    *logbuf.Buffer
	stop    func()
	// podLogs and videos, when set, are the backend's log and video sources.
	podLogs *fakePodLogs
	videos  *fakeVideos
	// lostAfter, when set, is the server's dead-agent timeout the backend
	// is told.
	lostAfter time.Duration
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, fake: leasetest.Start(t), logs: &logbuf.Buffer{},
		cluster: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{PyTorchJobs: "PyTorchJobList", Pods: "PodList"})}
	t.Cleanup(func() {
		if w.stop != nil {
			w.stop()
		}
		if t.Failed() {
			t.Logf("backend log:\n%s", w.logs.String())
		}
	})
	return w
}

// start runs a backend (again, after stop: a restart).
func (w *world) start() {
	w.t.Helper()
	conn, err := leaseconn.Dial(w.fake.Addr(), leaseconn.StaticToken("token"), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	cfg := Config{
		AgentID: "k8s-backend-1", ClaimWait: time.Second, PollInterval: 50 * time.Millisecond,
		RenewInterval: 200 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, AgentLostAfter: w.lostAfter,
		Render: renderConfig(),
		Logger: slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if w.podLogs != nil {
		cfg.Logs = w.podLogs
	}
	if w.videos != nil {
		cfg.Videos = w.videos
	}
	b, err := New(cfg, taskv1.NewLeaseServiceClient(conn), w.cluster)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	w.stop = func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("backend run: %v", err)
		}
		conn.Close()
		w.stop = nil
	}
}

func (w *world) job(name string) (*unstructured.Unstructured, error) {
	return w.cluster.Resource(PyTorchJobs).Namespace("video").Get(context.Background(), name, metav1.GetOptions{})
}

func (w *world) waitJob(name string) *unstructured.Unstructured {
	w.t.Helper()
	var job *unstructured.Unstructured
	leasetest.WaitFor(w.t, 10*time.Second, "job "+name, func() bool {
		j, err := w.job(name)
		job = j
		return err == nil
	})
	return job
}

func (w *world) waitGone(name string) {
	w.t.Helper()
	leasetest.WaitFor(w.t, 10*time.Second, "deletion of job "+name, func() bool {
		_, err := w.job(name)
		return apierrors.IsNotFound(err)
	})
}

// running waits for the task's job, has the training operator run it,
// and waits for the backend's StartTask; it returns the job's name.
func (w *world) running(id string) string {
	w.t.Helper()
	name := JobName(id)
	w.waitJob(name)
	w.setConditions(name, "", "Created", "Running")
	leasetest.WaitFor(w.t, 5*time.Second, "StartTask", func() bool { return w.calls("StartTask", id) == 1 })
	return name
}

// setConditions plays the training operator: the job's conditions become
// the given types, all True, the last with message.
func (w *world) setConditions(name, message string, types ...string) {
	w.t.Helper()
	job, err := w.job(name)
	if err != nil {
		w.t.Fatal(err)
	}
	var conds []any
	for i, typ := range types {
		c := map[string]any{"type": typ, "status": "True", "reason": "PyTorchJob" + typ}
		if i == len(types)-1 && message != "" {
			c["message"] = message
		}
		conds = append(conds, c)
	}
	if err := unstructured.SetNestedSlice(job.Object, conds, "status", "conditions"); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.cluster.Resource(PyTorchJobs).Namespace("video").UpdateStatus(context.Background(), job, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// waitReleased waits until the backend has let go of an attempt: a
// heartbeat lists it, and a later one does not. Heartbeats are sent one
// after another, each listing the attempts held when it was built, so by
// then the attempt's loop has returned and will send nothing more.
func (w *world) waitReleased(attemptID string) {
	w.t.Helper()
	leasetest.WaitFor(w.t, 10*time.Second, "heartbeats to drop attempt "+attemptID, func() bool {
		listed := false
		for _, c := range w.fake.Calls("SendHeartbeat") {
			has := slices.Contains(c.Req.(*taskv1.SendHeartbeatRequest).GetAttemptIds(), attemptID)
			if listed && !has {
				return true
			}
			listed = listed || has
		}
		return false
	})
}

func (w *world) calls(method, taskID string) int {
	n := 0
	for _, c := range w.fake.Calls(method) {
		if r, ok := c.Req.(interface{ GetTaskId() string }); ok && r.GetTaskId() == taskID {
			n++
		}
	}
	return n
}

func claimed(id, typ, queue string) *taskv1.Task {
	t := videoTask(id, typ, queue, "2")
	t.AttemptId, t.Timeout = "", 600
	return t
}

func TestConditionsMapToTheLeaseAPI(t *testing.T) {
	w := newWorld(t)
	id := w.fake.Add(claimed("task-ok", textToVideo, "premium"))[0]
	w.start()
	name := JobName(id)
	job := w.waitJob(name)
	if job.GetLabels()[QueueLabel] != "premium" || job.GetAnnotations()[AttemptAnno] != w.fake.Attempt(id) {
		t.Fatalf("submitted job labels %v annotations %v", job.GetLabels(), job.GetAnnotations())
	}
	claims := w.fake.Calls("ClaimTasks")
	if types := claims[0].Req.(*taskv1.ClaimTasksRequest).GetTypes(); len(types) != 1 || types[0] != "video" {
		t.Errorf("claims types %v, want video only", types)
	}

	// Created, then held by Kueue: the task stays assigned, its lease alive.
	w.setConditions(name, "", "Created")
	w.setConditions(name, "", "Created", "Suspended")
	renewsBefore := w.calls("RenewTaskLease", id)
	leasetest.WaitFor(t, 5*time.Second, "lease renewals while queued", func() bool {
		return w.calls("RenewTaskLease", id) >= renewsBefore+2
	})
	if n := w.calls("StartTask", id); n != 0 {
		t.Fatalf("StartTask sent %d times while Kueue holds the job", n)
	}

	// Admitted and running: StartTask, once.
	w.setConditions(name, "", "Created", "Running")
	leasetest.WaitFor(t, 5*time.Second, "StartTask", func() bool { return w.calls("StartTask", id) == 1 })
	// The attempt's loop reads the job after every renewal; by the second
	// renewal after the start it has seen the running job at least once
	// more, and would have started it again.
	renews := w.calls("RenewTaskLease", id)
	leasetest.WaitFor(t, 5*time.Second, "two more renewals", func() bool { return w.calls("RenewTaskLease", id) >= renews+2 })
	if n := w.calls("StartTask", id); n != 1 {
		t.Errorf("StartTask sent %d times, want once", n)
	}

	// Succeeded: the outcome names the video's S3 location.
	w.setConditions(name, "", "Created", "Running", "Succeeded")
	c := w.fake.WaitComplete(t, id, 5*time.Second)
	var res Result
	if c.GetExitCode() != 0 || c.GetError() != "" || json.Unmarshal([]byte(c.GetStdout()), &res) != nil {
		t.Fatalf("completion %v", c)
	}
	if res.S3Bucket != "wan22" || res.S3KeyPrefix != name || res.S3URL != "s3://wan22/"+name+"/" ||
		res.S3EndpointURL != "https://s3.cn-north-1.qiniucs.com" {
		t.Errorf("result %+v", res)
	}
	// The finished job stays, no longer the backend's.
	leasetest.WaitFor(t, 5*time.Second, "finished job unlabelled", func() bool {
		j, err := w.job(name)
		return err == nil && j.GetLabels()[AgentLabel] == ""
	})
}

func TestFailedJobFailsTheTask(t *testing.T) {
	w := newWorld(t)
	id := w.fake.Add(claimed("task-fail", imageToVideo, "standard"))[0]
	w.start()
	name := JobName(id)
	w.waitJob(name)
	// Failed straight from the queue: StartTask first, then the failure.
	w.setConditions(name, "Job has failed because it has reached the specified backoff limit", "Created", "Failed")
	c := w.fake.WaitComplete(t, id, 5*time.Second)
	if c.GetExitCode() != 1 || c.GetError() != "Job has failed because it has reached the specified backoff limit" {
		t.Errorf("completion exit %d error %q", c.GetExitCode(), c.GetError())
	}
	if w.calls("StartTask", id) != 1 {
		t.Errorf("StartTask %d times, want once before the failure", w.calls("StartTask", id))
	}
}

func TestCancelAndPreemptDeleteTheJob(t *testing.T) {
	for _, reason := range []string{"cancelled", "preempted"} {
		t.Run(reason, func(t *testing.T) {
			w := newWorld(t)
			id := w.fake.Add(claimed("task-"+reason, textToVideo, "standard"))[0]
			w.start()
			name := JobName(id)
			w.waitJob(name)
			w.setConditions(name, "", "Created", "Running")
			leasetest.WaitFor(t, 5*time.Second, "StartTask", func() bool { return w.calls("StartTask", id) == 1 })
			w.fake.StopOnHeartbeat(id, reason, 30)
			w.waitGone(name)
			w.waitReleased(w.fake.Attempt(id))
			if n := w.calls("CompleteTask", id); n != 0 {
				t.Errorf("CompleteTask sent %d times for a stop the server decided", n)
			}
		})
	}
}

func TestLostLeaseDeletesTheJob(t *testing.T) {
	w := newWorld(t)
	id := w.fake.Add(claimed("task-lost", textToVideo, "standard"))[0]
	w.start()
	name := JobName(id)
	w.waitJob(name)
	w.fake.ExpireLease(id)
	w.waitGone(name)
}

// A backend cut off from the server deletes its jobs before the server
// may lease their tasks again (docs/executor.md, "Fencing"), and reports
// the attempt fenced once the server answers again.
func TestCutOffBackendDeletesItsJobsBeforeTheServerMovesThem(t *testing.T) {
	const lostAfter = 3 * time.Second // a fence of 2 s
	w := newWorld(t)
	w.lostAfter = lostAfter
	id := w.fake.Add(claimed("task-fenced", textToVideo, "standard"))[0]
	w.start()
	name := w.running(id)

	// The training operator's pods of the job, and another job's.
	for _, p := range []struct{ name, job string }{{name + "-master-0", name}, {name + "-worker-0", name}, {"other-master-0", "other"}} {
		pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": p.name, "namespace": "video", "labels": map[string]any{jobNameLabel: p.job}}}}
		if _, err := w.cluster.Resource(Pods).Namespace("video").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cut := time.Now()
	w.fake.SetFail(func(string, proto.Message) error { return status.Error(codes.Unavailable, "cut off") })
	w.waitGone(name)
	gone := time.Now()
	// Its pods go at once (the fence's kill grace, 0 s under a 3 s
	// timeout), not after their own termination grace; the other job's
	// stays.
	leasetest.WaitFor(t, 5*time.Second, "the job's pods deleted", func() bool {
		list, err := w.cluster.Resource(Pods).Namespace("video").List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 1 && list.Items[0].GetName() == "other-master-0"
	})
	for _, a := range w.cluster.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.GetResource() == Pods {
			if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 0 {
				t.Fatalf("pod %s deleted with grace %v, want 0", d.GetName(), g)
			}
		}
	}
	heard := w.fake.LastHeard(cut)
	if releasable := heard.Add(lostAfter); !gone.Before(releasable) {
		t.Fatalf("job deleted %s after the server last heard from the backend; it could lease the task again after %s", gone.Sub(heard), lostAfter)
	}
	// Not before the fence (2 s) had passed since then: the call was sent
	// a little before the fake received it.
	if early := heard.Add(2*time.Second - 300*time.Millisecond); gone.Before(early) {
		t.Fatalf("job deleted %s after the server last heard from the backend, before the fence", gone.Sub(heard))
	}

	w.fake.SetFail(nil)
	done := w.fake.WaitComplete(t, id, 20*time.Second)
	if !strings.HasPrefix(done.GetError(), "fenced: ") || done.GetExitCode() != -1 {
		t.Fatalf("outcome exit %d error %q, want the attempt reported fenced", done.GetExitCode(), done.GetError())
	}
}

// A heartbeat interval under which the fence could pass between two
// answered heartbeats is a configuration error.
func TestHeartbeatIntervalMustFitTheFence(t *testing.T) {
	_, err := Config{AgentID: "k", HeartbeatInterval: 7 * time.Second, Render: renderConfig()}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "heartbeat interval") {
		t.Fatalf("err %v, want the heartbeat interval refused for the default 12 s fence", err)
	}
	if _, err := (Config{AgentID: "k", HeartbeatInterval: 6 * time.Second, Render: renderConfig()}).withDefaults(); err != nil {
		t.Fatalf("6 s heartbeats under a 12 s fence: %v", err)
	}
}

func TestJobDeletedInTheClusterFailsTheTask(t *testing.T) {
	w := newWorld(t)
	id := w.fake.Add(claimed("task-vanished", textToVideo, "standard"))[0]
	w.start()
	name := JobName(id)
	w.waitJob(name)
	if err := w.cluster.Resource(PyTorchJobs).Namespace("video").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c := w.fake.WaitComplete(t, id, 5*time.Second)
	if c.GetExitCode() != -1 || !strings.Contains(c.GetError(), "PyTorchJob "+name+" was deleted before it finished") {
		t.Errorf("completion exit %d error %q", c.GetExitCode(), c.GetError())
	}
}

func TestTaskThatCannotBeRenderedFailsWithoutAJob(t *testing.T) {
	w := newWorld(t)
	task := claimed("task-bad", imageToVideo, "standard")
	task.Video.ImageUrl = ""
	id := w.fake.Add(task)[0]
	w.start()
	c := w.fake.WaitComplete(t, id, 5*time.Second)
	if c.GetExitCode() != -1 || c.GetError() != "render PyTorchJob: image_to_video needs image_url" {
		t.Errorf("completion exit %d error %q", c.GetExitCode(), c.GetError())
	}
	list, err := w.cluster.Resource(PyTorchJobs).Namespace("video").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("jobs %v (%v): a refused task created one", list, err)
	}
}

// A restarted backend finds its running job through the label and reports
// its end.
func TestRestartedBackendFollowsItsJobs(t *testing.T) {
	w := newWorld(t)
	id := w.fake.Add(claimed("task-restart", textToVideo, "premium"))[0]
	w.start()
	name := w.running(id)
	w.stop()

	w.setConditions(name, "", "Created", "Running", "Succeeded")
	w.start()
	c := w.fake.WaitComplete(t, id, 5*time.Second)
	if c.GetExitCode() != 0 || !strings.Contains(c.GetStdout(), name) {
		t.Errorf("completion after restart %v", c)
	}
}

// A job left by an earlier attempt of the same task is replaced by this
// attempt's.
func TestJobOfAnEarlierAttemptIsReplaced(t *testing.T) {
	w := newWorld(t)
	stale, err := Render(videoTask("task-again", textToVideo, "standard", "2"), renderConfig())
	if err != nil {
		t.Fatal(err)
	}
	stale.SetAnnotations(map[string]string{TaskAnnotation: "task-again", AttemptAnno: "attempt-old"})
	stale.SetLabels(map[string]string{QueueLabel: "standard"}) // not this backend's: not adopted
	if _, err := w.cluster.Resource(PyTorchJobs).Namespace("video").Create(context.Background(), stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	id := w.fake.Add(claimed("task-again", textToVideo, "standard"))[0]
	w.start()
	leasetest.WaitFor(t, 10*time.Second, "the new attempt's job", func() bool {
		j, err := w.job(JobName(id))
		return err == nil && j.GetAnnotations()[AttemptAnno] == w.fake.Attempt(id)
	})
}

func TestJobPhase(t *testing.T) {
	cond := func(typ, status, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "message": msg}
	}
	tests := []struct {
		name    string
		conds   []any
		want    Phase
		wantMsg string
	}{
		{name: "no status yet", want: Queued},
		{name: "created", conds: []any{cond("Created", "True", "")}, want: Queued},
		{name: "suspended by Kueue", conds: []any{cond("Created", "True", ""), cond("Suspended", "True", "")}, want: Queued},
		{name: "running", conds: []any{cond("Created", "True", ""), cond("Suspended", "False", ""), cond("Running", "True", "")}, want: Running},
		{name: "restarting", conds: []any{cond("Created", "True", ""), cond("Running", "False", ""), cond("Restarting", "True", "")}, want: Running},
		{name: "evicted by Kueue after running", conds: []any{cond("Running", "False", ""), cond("Suspended", "True", "")}, want: Queued},
		{name: "succeeded", conds: []any{cond("Running", "False", ""), cond("Succeeded", "True", "")}, want: Succeeded},
		{name: "failed with a message", conds: []any{cond("Running", "False", ""), cond("Failed", "True", "OOMKilled")}, want: Failed, wantMsg: "OOMKilled"},
		{name: "failed with a reason only", conds: []any{map[string]any{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}}, want: Failed, wantMsg: "BackoffLimitExceeded"},
		{name: "failed without words", conds: []any{cond("Failed", "True", "")}, want: Failed, wantMsg: "PyTorchJob failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := &unstructured.Unstructured{Object: map[string]any{}}
			if tc.conds != nil {
				_ = unstructured.SetNestedSlice(job.Object, tc.conds, "status", "conditions")
			}
			got, msg := JobPhase(job)
			if got != tc.want || msg != tc.wantMsg {
				t.Errorf("JobPhase = %s %q, want %s %q", got, msg, tc.want, tc.wantMsg)
			}
		})
	}
}

func TestConfigNeedsAgentAndS3(t *testing.T) {
	cluster := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	if _, err := New(Config{Render: renderConfig()}, nil, cluster); err == nil || !strings.Contains(err.Error(), "agent id is required") {
		t.Errorf("without agent id: %v", err)
	}
	if _, err := New(Config{AgentID: "a"}, nil, cluster); err == nil || !strings.Contains(err.Error(), "S3 endpoint and bucket") {
		t.Errorf("without S3: %v", err)
	}
}

// An outcome the server could not take before the backend stopped is
// reported by the next backend: the job keeps its label until then.
func TestOutcomeSurvivesABackendRestartWhileTheServerIsDown(t *testing.T) {
	w := newWorld(t)
	id := w.fake.Add(claimed("task-outage", textToVideo, "standard"))[0]
	w.start()
	name := JobName(id)
	w.waitJob(name)
	w.fake.SetFail(func(method string, _ proto.Message) error {
		if method == "CompleteTask" {
			return status.Error(codes.Unavailable, "server down")
		}
		return nil
	})
	w.setConditions(name, "", "Created", "Running", "Succeeded")
	leasetest.WaitFor(t, 5*time.Second, "a refused completion", func() bool { return w.calls("CompleteTask", id) > 0 })
	w.stop()
	if j, err := w.job(name); err != nil || j.GetLabels()[AgentLabel] == "" {
		t.Fatalf("job %v (%v): the unreported job lost the backend's label", j, err)
	}
	w.fake.SetFail(nil)
	w.start()
	if c := w.fake.WaitComplete(t, id, 5*time.Second); c.GetExitCode() != 0 {
		t.Errorf("completion after restart %v", c)
	}
}
