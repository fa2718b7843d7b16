package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/taskmesh/taskmesh/services/executor"
)

// kubeAPI is the part of a Kubernetes API server the Kubernetes backend
// uses: PyTorchJobs (list, create, get, merge patch, delete) and pods
// (list, log) in one namespace. The test plays the training operator on
// it: it sets a job's conditions and gives it a master pod with a log.
type kubeAPI struct {
	mu   sync.Mutex
	jobs map[string]map[string]any
	// logs of each job's master pod, by job name.
	logs map[string]string
}

const (
	kubeNamespace = "video"
	jobsPath      = "/apis/kubeflow.org/v1/namespaces/" + kubeNamespace + "/pytorchjobs"
	podsPath      = "/api/v1/namespaces/" + kubeNamespace + "/pods"
)

func (k *kubeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	name := strings.TrimPrefix(r.URL.Path, jobsPath+"/")
	switch {
	case r.URL.Path == jobsPath && r.Method == http.MethodGet:
		items := []any{}
		for _, j := range k.jobs {
			items = append(items, j)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "metadata": map[string]any{}, "items": items})
	case r.URL.Path == jobsPath && r.Method == http.MethodPost:
		var job map[string]any
		_ = json.Unmarshal(body, &job)
		n := job["metadata"].(map[string]any)["name"].(string)
		k.jobs[n] = job
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(job)
	case strings.HasPrefix(r.URL.Path, jobsPath+"/") && k.jobs[name] == nil:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	case strings.HasPrefix(r.URL.Path, jobsPath+"/") && r.Method == http.MethodGet:
		_ = json.NewEncoder(w).Encode(k.jobs[name])
	case strings.HasPrefix(r.URL.Path, jobsPath+"/") && r.Method == http.MethodPatch:
		var patch map[string]any
		_ = json.Unmarshal(body, &patch)
		mergePatch(k.jobs[name], patch)
		_ = json.NewEncoder(w).Encode(k.jobs[name])
	case strings.HasPrefix(r.URL.Path, jobsPath+"/") && r.Method == http.MethodDelete:
		delete(k.jobs, name)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	case r.URL.Path == podsPath && r.Method == http.MethodGet:
		// The master pod of the job the label selector names.
		items := []any{}
		for job := range k.logs {
			if strings.Contains(r.URL.Query().Get("labelSelector"), "training.kubeflow.org/job-name="+job) {
				items = append(items, map[string]any{"apiVersion": "v1", "kind": "Pod",
					"metadata": map[string]any{"name": job + "-master-0", "namespace": kubeNamespace},
					"status":   map[string]any{"phase": "Running"}})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "PodList", "metadata": map[string]any{}, "items": items})
	case strings.HasPrefix(r.URL.Path, podsPath+"/") && strings.HasSuffix(r.URL.Path, "-master-0/log"):
		job := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, podsPath+"/"), "-master-0/log")
		if r.URL.Query().Get("container") != "pytorch" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, k.logs[job])
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

// mergePatch applies a JSON merge patch (RFC 7386) to doc.
func mergePatch(doc, patch map[string]any) {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			sub, ok := doc[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
				doc[k] = sub
			}
			mergePatch(sub, pv)
		default:
			doc[k] = v
		}
	}
}

func (k *kubeAPI) job(name string) map[string]any {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.jobs[name]
}

// setConditions plays the training operator: the job's conditions, all
// True.
func (k *kubeAPI) setConditions(name string, types ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var conds []any
	for _, t := range types {
		conds = append(conds, map[string]any{"type": t, "status": "True", "reason": "PyTorchJob" + t})
	}
	k.jobs[name]["status"] = map[string]any{"conditions": conds}
}

// print adds a line to the job's master pod log.
func (k *kubeAPI) print(job, line string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.logs[job] += line + "\n"
}

// A video generation run by the Kubernetes backend reports like one run
// by an agent: the model's progress lines in the master pod's log reach
// the task and the video API's live stream, and the video the job put in
// its bucket is uploaded as the task's result, so GET serves video_url.
// Kubernetes is the fake API server above; the bucket is gofakes3.
func TestKubernetesVideoRunReportsProgressAndServesTheVideo(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey

	api := &kubeAPI{jobs: map[string]map[string]any{}, logs: map[string]string{}}
	kube := httptest.NewServer(api)
	defer kube.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: backend, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: backend}}]
current-context: fake
`, kube.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	bucket := s3mem.New()
	if err := bucket.CreateBucket("wan22"); err != nil {
		t.Fatal(err)
	}
	s3 := httptest.NewServer(gofakes3.New(bucket).Server())
	defer s3.Close()

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- executor.RunKubernetes(ctx, executor.KubernetesConfig{
			AgentID: "k8s-video", Server: w.s.GRPCAddr, Token: w.agentToken("k8s-video"), Kubeconfig: kubeconfig,
			Namespace: kubeNamespace, S3Endpoint: s3.URL, S3Bucket: "wan22", S3AccessKey: "k", S3SecretKey: "s", S3Region: "us-east-1",
			UploadVideos: true, PollInterval: 100 * time.Millisecond,
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("kubernetes backend: %v", err)
		}
	})

	code, body, _ := w.call("POST", "/v1/video/generations", key, map[string]any{"model": "wan2.2-t2v",
		"input": map[string]any{"prompt": "a paper boat on a river"}, "parameters": map[string]any{"prompt_extend": false}})
	out, _ := body["output"].(map[string]any)
	if code != 200 || out["task_status"] != "QUEUED" {
		t.Fatalf("submit = %d %v", code, body)
	}
	id := out["task_id"].(string)
	wsCtx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(wsCtx, "ws"+strings.TrimPrefix(w.s.HTTPURL, "http")+"/v1/video/generations/"+id+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()

	job := "wan22-" + id
	waitFor(t, 30*time.Second, "the backend's PyTorchJob", func() bool { return api.job(job) != nil })
	api.setConditions(job, "Created", "Running")
	api.print(job, "loading the checkpoint")
	api.print(job, "::progress::40 denoising 20/50")
	mp4 := []byte("\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom the video the job rendered")

	var statuses []string
	var progress []float64
	for {
		_, raw, err := conn.Read(wsCtx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				break
			}
			t.Fatalf("read after %v: %v", statuses, err)
		}
		var f struct {
			Event string         `json:"event"`
			Data  map[string]any `json:"data"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("frame %s: %v", raw, err)
		}
		s := f.Data["task_status"].(string)
		if len(statuses) == 0 || statuses[len(statuses)-1] != s {
			statuses = append(statuses, s)
		}
		if f.Event != "progress" {
			continue
		}
		p := f.Data["taskProgress"].(float64)
		progress = append(progress, p)
		switch p {
		case 40:
			api.print(job, "::progress::90 encoding")
		case 90:
			// The model uploads the video, and the job succeeds.
			// (gofakes3's own PUT would record Last-Modified; its backend
			// does not.)
			meta := map[string]string{"Content-Type": "video/mp4", "Last-Modified": time.Now().UTC().Format(http.TimeFormat)}
			if _, err := bucket.PutObject("wan22", job+"/"+job+".mp4", meta,
				bytes.NewReader(mp4), int64(len(mp4)), nil); err != nil {
				t.Fatal(err)
			}
			api.setConditions(job, "Created", "Running", "Succeeded")
		}
	}
	if strings.Join(statuses, " → ") != "QUEUED → RUNNING → SUCCEEDED" {
		_, task, _ := w.call("GET", "/api/v1/tasks/"+id, key, nil)
		t.Fatalf("statuses seen = %v; the task: %v", statuses, task)
	}
	if fmt.Sprint(progress) != "[40 90]" {
		t.Fatalf("progress frames %v, want [40 90]", progress)
	}

	code, got, _ := w.call("GET", "/v1/video/generations/"+id, key, nil)
	data, _ := got["data"].(map[string]any)
	in, _ := data["taskInput"].(map[string]any)
	url, _ := in["video_url"].(string)
	if code != 200 || data["task_status"] != "SUCCEEDED" || url == "" {
		t.Fatalf("GET = %d %v", code, got)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	video, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "video/mp4" || !bytes.Equal(video, mp4) {
		t.Fatalf("download: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(video))
	}
}
