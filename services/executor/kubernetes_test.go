package executor

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
)

// apiServer is the part of a Kubernetes API server the backend uses for
// PyTorchJobs: list, create and get in one namespace.
type apiServer struct {
	mu   sync.Mutex
	jobs map[string]json.RawMessage
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const base = "/apis/kubeflow.org/v1/namespaces/video/pytorchjobs"
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == base:
		items := []json.RawMessage{}
		for _, j := range s.jobs {
			items = append(items, j)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "metadata": map[string]any{}, "items": items})
	case r.Method == http.MethodPost && r.URL.Path == base:
		body, _ := io.ReadAll(r.Body)
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = json.Unmarshal(body, &meta)
		s.jobs[meta.Metadata.Name] = body
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, base+"/"):
		if j, ok := s.jobs[strings.TrimPrefix(r.URL.Path, base+"/")]; ok {
			_, _ = w.Write(j)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

func (s *apiServer) job(name string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[name]
}

// The backend reaches a cluster through a kubeconfig file and submits the
// claimed task's PyTorchJob there.
func TestRunKubernetesSubmitsThroughTheKubeconfig(t *testing.T) {
	api := &apiServer{jobs: map[string]json.RawMessage{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "`+srv.URL+`"}}]
users: [{name: test, user: {token: cluster-token}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := leasetest.Start(t)
	id := fake.Add(&taskv1.Task{Id: "3f1c0a2e-video", Name: "clip", Type: "video", Queue: "premium",
		Video: &taskv1.VideoParams{Model: "wan2.2-t2v", Type: "text_to_video", Prompt: "雨中的城市", Resolution: "720P",
			Width: 1280, Height: 720, Duration: 5, FrameNum: 81}})[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunKubernetes(ctx, KubernetesConfig{AgentID: "k8s-1", Server: fake.Addr(), Kubeconfig: kubeconfig,
			Namespace: "video", S3Endpoint: "https://s3.example", S3Bucket: "videos", PollInterval: 100 * time.Millisecond})
	}()
	leasetest.WaitFor(t, 10*time.Second, "the job in the cluster", func() bool { return api.job("wan22-"+id) != nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunKubernetes: %v", err)
	}
	var job map[string]any
	if err := json.Unmarshal(api.job("wan22-"+id), &job); err != nil {
		t.Fatal(err)
	}
	labels := job["metadata"].(map[string]any)["labels"].(map[string]any)
	if labels["kueue.x-k8s.io/queue-name"] != "premium" || !strings.Contains(string(api.job("wan22-"+id)), "雨中的城市") {
		t.Errorf("job %s", api.job("wan22-"+id))
	}

	// A heartbeat interval under which the fence could pass between two
	// answered heartbeats is refused before anything is claimed.
	err := RunKubernetes(context.Background(), KubernetesConfig{AgentID: "k8s-2", Server: fake.Addr(), Kubeconfig: kubeconfig,
		Namespace: "video", S3Endpoint: "https://s3.example", S3Bucket: "videos", HeartbeatInterval: 7 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "heartbeat interval") {
		t.Fatalf("RunKubernetes with 7 s heartbeats under the default 12 s fence: %v", err)
	}
}

func TestRunKubernetesRefusesBadSettings(t *testing.T) {
	tests := []struct {
		name    string
		cfg     KubernetesConfig
		wantErr string
	}{
		{name: "no server", cfg: KubernetesConfig{AgentID: "a", Kubeconfig: "x"}, wantErr: "the server address is required"},
		{name: "missing kubeconfig", cfg: KubernetesConfig{AgentID: "a", Server: "127.0.0.1:1", Kubeconfig: "/nonexistent/kubeconfig"}, wantErr: "kubeconfig /nonexistent/kubeconfig"},
		{name: "not in a cluster", cfg: KubernetesConfig{AgentID: "a", Server: "127.0.0.1:1"}, wantErr: "no --kubeconfig given and not running in a cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if os.Getenv("KUBERNETES_SERVICE_HOST") != "" && tc.cfg.Kubeconfig == "" {
				t.Fatal("this test must not run inside a cluster")
			}
			err := RunKubernetes(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
