package kubernetes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakePodLogs is the master pod's log, as the test writes it.
type fakePodLogs struct {
	mu   sync.Mutex
	logs map[string]string
}

func (f *fakePodLogs) MasterLog(_ context.Context, job string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logs[job], nil
}

func (f *fakePodLogs) print(job, line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[job] += line + "\n"
}

// fakeVideos is the jobs' bucket.
type fakeVideos struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func (f *fakeVideos) Open(_ context.Context, key string) (io.ReadCloser, objectstore.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[key]
	if !ok {
		return nil, objectstore.Info{}, fmt.Errorf("%s: %w", key, objectstore.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), objectstore.Info{Key: key, Size: int64(len(b))}, nil
}

// uploads records the PUTs of result objects.
type uploads struct {
	mu     sync.Mutex
	bodies map[string][]byte
	types  map[string]string
}

func (u *uploads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.bodies[r.URL.Path], u.types[r.URL.Path] = b, r.Header.Get("Content-Type")
}

// A running job's progress reaches the task: from the master pod's
// progress lines, or the job's annotation, whichever is set (the
// annotation first). A succeeded job's video becomes the task's result
// object (video/mp4), which the video API serves as video_url.
func TestJobProgressAndVideoReachTheTask(t *testing.T) {
	w := newWorld(t)
	w.podLogs = &fakePodLogs{logs: map[string]string{}}
	w.videos = &fakeVideos{objects: map[string][]byte{}}
	up := &uploads{bodies: map[string][]byte{}, types: map[string]string{}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	w.fake.SetUploadURL(srv.URL)
	id := w.fake.Add(claimed("task-progress", textToVideo, "premium"))[0]
	w.start()
	name := JobName(id)
	w.waitJob(name)
	w.setConditions(name, "", "Created", "Running")

	progress := func() []string {
		var out []string
		for _, c := range w.fake.Calls("ReportTaskProgress") {
			req := c.Req.(*taskv1.ReportTaskProgressRequest)
			out = append(out, fmt.Sprintf("%d %s", req.GetProgress(), req.GetMessage()))
		}
		return out
	}
	w.podLogs.print(name, "loading the checkpoint")
	w.podLogs.print(name, "::progress::30 denoising 15/50")
	leasetest.WaitFor(t, 5*time.Second, "progress from the log", func() bool {
		return strings.Contains(strings.Join(progress(), "|"), "30 denoising 15/50")
	})
	job, err := w.job(name)
	if err != nil {
		t.Fatal(err)
	}
	job.SetAnnotations(map[string]string{ProgressAnnotation: "80 encoding", AttemptAnno: w.fake.Attempt(id), TaskAnnotation: id})
	if _, err := w.cluster.Resource(PyTorchJobs).Namespace("video").Update(context.Background(), job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, 5*time.Second, "progress from the annotation", func() bool {
		return strings.Contains(strings.Join(progress(), "|"), "80 encoding")
	})
	if n := len(progress()); n != 2 {
		t.Errorf("progress reported %d times (%v), want once per change", n, progress())
	}

	mp4 := []byte("\x00\x00\x00\x18ftypmp42 a video")
	w.videos.mu.Lock()
	w.videos.objects[VideoKey(name)] = mp4
	w.videos.mu.Unlock()
	w.setConditions(name, "", "Created", "Running", "Succeeded")
	c := w.fake.WaitComplete(t, id, 10*time.Second)
	obj := c.GetResultObject()
	sum := sha256.Sum256(mp4)
	if c.GetExitCode() != 0 || obj == nil || obj.GetSizeBytes() != int64(len(mp4)) || obj.GetSha256() != hex.EncodeToString(sum[:]) {
		t.Fatalf("completion %v", c)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if got := up.bodies["/"+obj.GetKey()]; !bytes.Equal(got, mp4) || up.types["/"+obj.GetKey()] != "video/mp4" {
		t.Fatalf("uploaded %q as %q", got, up.types["/"+obj.GetKey()])
	}
}

// A job that succeeded without a video in the bucket fails its task with
// the reason: the task promised a video.
func TestSucceededJobWithoutVideoFails(t *testing.T) {
	w := newWorld(t)
	w.videos = &fakeVideos{objects: map[string][]byte{}}
	id := w.fake.Add(claimed("task-novideo", textToVideo, "premium"))[0]
	w.start()
	name := JobName(id)
	w.waitJob(name)
	w.setConditions(name, "", "Created", "Running", "Succeeded")
	c := w.fake.WaitComplete(t, id, 10*time.Second)
	if c.GetExitCode() == 0 || !strings.Contains(c.GetError(), "s3://wan22/"+VideoKey(name)) {
		t.Fatalf("completion exit %d error %q", c.GetExitCode(), c.GetError())
	}
}

func TestLatestProgress(t *testing.T) {
	tests := []struct {
		log  string
		v    int
		msg  string
		want bool
	}{
		{"", 0, "", false},
		{"::progress::10 a\nnoise\n::progress::20 b\r\n", 20, "b", true},
		{"::progress::10 a\n::progress::200 bad\n", 10, "a", true},
		{"progress::50 not a marker", 0, "", false},
	}
	for _, tt := range tests {
		v, msg, ok := latestProgress(tt.log)
		if v != tt.v || msg != tt.msg || ok != tt.want {
			t.Errorf("latestProgress(%q) = %d %q %v", tt.log, v, msg, ok)
		}
	}
}
