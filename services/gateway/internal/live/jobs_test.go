package live

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
)

// fakeJobs is the scheduler's GetJob: the job as it is when it is read.
type fakeJobs struct {
	mu  sync.Mutex
	job *pipelinev1.Job
}

func (f *fakeJobs) GetJob(context.Context, *pipelinev1.GetJobRequest, ...grpc.CallOption) (*pipelinev1.GetJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &pipelinev1.GetJobResponse{Job: proto.CloneOf(f.job)}, nil
}

func (f *fakeJobs) set(j *pipelinev1.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.job = j
}

// frameLog records the frames a stream sends.
type frameLog struct {
	mu     sync.Mutex
	frames []sentFrame
}

type sentFrame struct {
	id    int64
	event string
}

func (l *frameLog) send(_ context.Context, id int64, event string, _ []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frames = append(l.frames, sentFrame{id, event})
	return nil
}

func (l *frameLog) keepAlive(context.Context) error { return nil }

func (l *frameLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.frames)
}

// pipelineJob is the job as GetJob answers it at its version: its output
// links are signed at each read, so their expiry differs from one read to
// the next, as a real answer's does.
func pipelineJob(version int64, status, stage string, progress int32) *pipelinev1.Job {
	link := func(key string) *wrapperspb.StringValue {
		return wrapperspb.String(fmt.Sprintf("http://127.0.0.1:9000/%s?X-Expires=%d&X-Signature=s%d", key, 3700+version, version))
	}
	j := &pipelinev1.Job{JobId: "j1", Status: status, Stage: stage, Progress: progress, Version: version,
		CreatedAt: timestamppb.New(time.Unix(100, 0)), UpdatedAt: timestamppb.New(time.Unix(100+version, 0)),
		Output: &pipelinev1.JobOutput{BieKey: wrapperspb.String("jobs/j1/output/result.bie"),
			BieUrl: link("jobs/j1/output/result.bie")},
		StageTasks: map[string]string{"onnx": "t1", "bie": "t2", "nef": "t3"}}
	if status == JobCompleted {
		j.Output.NefKey = wrapperspb.String("jobs/j1/output/result.nef")
		j.Output.NefUrl = link("jobs/j1/output/result.nef")
	}
	return j
}

// A frame is named by what changed in the job, not by the event that woke
// the stream: a progress report whose read finds the job already COMPLETED
// is a status frame, so a client that follows status frames sees the end.
func TestJobFrameIsNamedByWhatChanged(t *testing.T) {
	jobs := &fakeJobs{}
	svc, err := New(Config{Tasks: &fakeTasks{}, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	sub := &Subscription{events: make(chan delivery, 4), resync: make(chan struct{}, 1), dropped: make(chan struct{})}
	js := &jobStream{svc: svc, id: "j1", sub: sub}
	out := &frameLog{}
	done := make(chan end, 1)
	go func() {
		reason, _ := js.run(context.Background(), out, pipelineJob(6, "NEF", "NEF", 0))
		done <- reason
	}()
	progressed := func(v int64) delivery {
		return delivery{event: &pipelinev1.JobEvent{AggregateId: "j1", Version: v,
			Event: &pipelinev1.JobEvent_Progressed{Progressed: &pipelinev1.JobProgressed{Stage: "nef", Progress: 40}}}}
	}
	// A progress report, read as it is.
	jobs.set(pipelineJob(7, "NEF", "NEF", 40))
	sub.events <- progressed(7)
	waitFor(t, "the progress frame", func() bool { return out.count() == 2 })
	// Another report, but the stage ended before the stream read the job.
	jobs.set(pipelineJob(9, JobCompleted, "NEF", 100))
	sub.events <- progressed(8)
	select {
	case reason := <-done:
		if reason != endFinal {
			t.Fatalf("stream ended with %v, want the final frame", reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end after the COMPLETED frame")
	}
	want := []sentFrame{{6, EventStatus}, {7, EventProgress}, {9, EventStatus}}
	if len(out.frames) != len(want) {
		t.Fatalf("frames %v, want %v", out.frames, want)
	}
	for i := range want {
		if out.frames[i] != want[i] {
			t.Errorf("frame %d = %v, want %v", i, out.frames[i], want[i])
		}
	}
}

// A client that resumes at the job's current version does not get that
// frame again: the stream sends what comes after it, named against it.
func TestJobStreamResumedAtTheCurrentVersionSendsOnlyWhatFollows(t *testing.T) {
	jobs := &fakeJobs{}
	svc, err := New(Config{Tasks: &fakeTasks{}, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	sub := &Subscription{events: make(chan delivery, 4), resync: make(chan struct{}, 1), dropped: make(chan struct{})}
	js := &jobStream{svc: svc, id: "j1", sub: sub, sent: 6} // Last-Event-ID: 6
	out := &frameLog{}
	done := make(chan end, 1)
	go func() {
		reason, _ := js.run(context.Background(), out, pipelineJob(6, "NEF", "NEF", 0))
		done <- reason
	}()
	jobs.set(pipelineJob(7, "NEF", "NEF", 40))
	sub.events <- delivery{event: &pipelinev1.JobEvent{AggregateId: "j1", Version: 7}}
	waitFor(t, "the progress frame", func() bool { return out.count() == 1 })
	jobs.set(pipelineJob(8, JobCompleted, "NEF", 100))
	sub.events <- delivery{event: &pipelinev1.JobEvent{AggregateId: "j1", Version: 8}}
	select {
	case reason := <-done:
		if reason != endFinal {
			t.Fatalf("stream ended with %v, want the final frame", reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end after the COMPLETED frame")
	}
	want := []sentFrame{{7, EventProgress}, {8, EventStatus}}
	if len(out.frames) != len(want) || out.frames[0] != want[0] || out.frames[1] != want[1] {
		t.Fatalf("frames %v, want %v", out.frames, want)
	}
}

// A client that says it has a version the job has not reached gets
// nothing older, and the stream still ends once the job is final.
func TestJobStreamResumedAheadEndsWhenTheJobIsFinal(t *testing.T) {
	jobs := &fakeJobs{}
	svc, err := New(Config{Tasks: &fakeTasks{}, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	sub := &Subscription{events: make(chan delivery, 4), resync: make(chan struct{}, 1), dropped: make(chan struct{})}
	js := &jobStream{svc: svc, id: "j1", sub: sub, sent: 99}
	out := &frameLog{}
	done := make(chan end, 1)
	go func() {
		reason, _ := js.run(context.Background(), out, pipelineJob(6, "NEF", "NEF", 0))
		done <- reason
	}()
	jobs.set(pipelineJob(7, JobCompleted, "NEF", 100))
	sub.resync <- struct{}{}
	select {
	case reason := <-done:
		if reason != endFinal {
			t.Fatalf("stream ended with %v, want the end", reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end once the job was COMPLETED")
	}
	if out.count() != 0 {
		t.Errorf("frames %v, want none", out.frames)
	}
}
