package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/executor/internal/resultupload"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// ProgressAnnotation on a PyTorchJob carries "<0-100> [message]", for
// whatever in the cluster knows the job's progress better than its logs.
const ProgressAnnotation = "taskmesh.io/progress"

// Pods are the core resource the master pod is found in.
var Pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Labels the training operator puts on a job's pods.
const (
	jobNameLabel     = "training.kubeflow.org/job-name"
	replicaTypeLabel = "training.kubeflow.org/replica-type"
	modelContainer   = "pytorch"
)

// PodLogs reads the end of the model container's log in a job's master
// pod, where the model prints progress lines as any task does
// ("::progress::<0-100> [message]").
type PodLogs interface {
	MasterLog(ctx context.Context, job string) (string, error)
}

// VideoSource is where the jobs put their videos: the S3 bucket of the
// job template, read to upload each video as its task's result object.
type VideoSource interface {
	Open(ctx context.Context, key string) (io.ReadCloser, objectstore.Info, error)
}

// VideoKey is where a job's model writes the video in the bucket: under
// --s3_key_prefix <job>, the file named by --save_file (<job>.mp4).
func VideoKey(job string) string { return job + "/" + job + ".mp4" }

// NewPodLogs reads logs through the API server that rc reaches; the pods
// are listed with client. Both need only get/list on pods and get on
// pods/log in the namespace.
func NewPodLogs(rc *rest.Config, client dynamic.Interface, namespace string) (PodLogs, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	host := rc.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	return &podLogs{pods: client.Resource(Pods).Namespace(namespace), http: hc,
		base: strings.TrimSuffix(host, "/"), namespace: namespace}, nil
}

type podLogs struct {
	pods      dynamic.ResourceInterface
	http      *http.Client
	base      string
	namespace string
}

// logTailLines bounds what one poll reads: the newest progress line is
// near the end.
const logTailLines = 200

func (p *podLogs) MasterLog(ctx context.Context, job string) (string, error) {
	list, err := p.pods.List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + job + "," + replicaTypeLabel + "=master"})
	if err != nil {
		return "", err
	}
	name := ""
	for _, pod := range list.Items {
		if phase, _, _ := unstructured.NestedString(pod.Object, "status", "phase"); phase == "Running" || name == "" {
			name = pod.GetName()
		}
	}
	if name == "" {
		return "", nil // not scheduled yet
	}
	q := url.Values{"container": {modelContainer}, "tailLines": {fmt.Sprint(logTailLines)}, "limitBytes": {"65536"}}
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/log?%s", p.base, url.PathEscape(p.namespace), url.PathEscape(name), q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("log of pod %s: HTTP %d", name, resp.StatusCode)
	}
	return string(raw), nil
}

// latestProgress is the newest progress in a log: its last
// "::progress::" line.
func latestProgress(log string) (int, string, bool) {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		rest, ok := strings.CutPrefix(strings.TrimRight(lines[i], "\r"), shim.ProgressPrefix)
		if !ok {
			continue
		}
		if v, msg, ok := shim.ParseProgress(rest); ok {
			return v, msg, true
		}
	}
	return 0, "", false
}

// jobProgress reads a running job's progress: the annotation when set,
// else the master pod's log.
func (b *Backend) jobProgress(ctx context.Context, job *unstructured.Unstructured) (int, string, bool) {
	if a := job.GetAnnotations()[ProgressAnnotation]; a != "" {
		if v, msg, ok := shim.ParseProgress(a); ok {
			return v, msg, true
		}
	}
	if b.cfg.Logs == nil {
		return 0, "", false
	}
	log, err := b.cfg.Logs.MasterLog(ctx, job.GetName())
	if err != nil {
		b.log.Debug("read the master pod's log", "job", job.GetName(), "err", err)
		return 0, "", false
	}
	return latestProgress(log)
}

// reportProgress sends progress when it changed since the last report.
func (b *Backend) reportProgress(ctx context.Context, r *run, v int, msg string) {
	if v == r.progress && msg == r.progressMsg {
		return
	}
	if err := b.lease.Progress(ctx, r.Attempt, v, msg); err != nil {
		b.log.Warn("report progress", "task_id", r.TaskID, "err", err)
		return
	}
	r.progress, r.progressMsg = v, msg
}

// uploadVideo copies the job's video from the bucket to the task's result
// object (the presigned upload of the lease API), so the video API serves
// it as video_url like an agent's render.
func (b *Backend) uploadVideo(ctx context.Context, r *run) (*taskv1.ResultObject, error) {
	key := VideoKey(r.job)
	src, _, err := b.cfg.Videos.Open(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read the video s3://%s/%s: %w", b.cfg.Render.S3Bucket, key, err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp("", "taskmesh-video-*.mp4")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(tmp, h), src)
	if err != nil {
		return nil, fmt.Errorf("read the video s3://%s/%s: %w", b.cfg.Render.S3Bucket, key, err)
	}
	body := resultupload.Body{Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), ContentType: "video/mp4",
		Open: func() (io.ReadCloser, error) { return os.Open(tmp.Name()) }}
	return resultupload.Upload(ctx, b.lease.Client(), b.cfg.HTTP,
		resultupload.Attempt{TaskID: r.TaskID, AgentID: b.cfg.AgentID, AttemptID: r.AttemptID}, body, b.cfg.RPCTimeout)
}
