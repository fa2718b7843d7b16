package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRESTD records requests and answers like a newer slurmrestd on TCP
// with rest_auth/jwt: it offers v0.0.40 and v0.0.41, and refuses a
// request without the token it expects.
type fakeRESTD struct {
	mu       sync.Mutex
	token    string
	requests []recorded
}

type recorded struct {
	method, path, user, token string
	body                      map[string]any
}

func (f *fakeRESTD) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	rec := recorded{method: r.Method, path: r.URL.RequestURI(), user: r.Header.Get("X-SLURM-USER-NAME"), token: r.Header.Get("X-SLURM-USER-TOKEN")}
	_ = json.Unmarshal(raw, &rec.body)
	f.mu.Lock()
	f.requests = append(f.requests, rec)
	want := f.token
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if rec.token != want {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"errors":[{"error":"Authentication failure","error_number":1007}]}`))
		return
	}
	switch {
	case r.URL.Path == "/openapi/v3":
		_, _ = w.Write([]byte(`{"openapi":"3.0.2","paths":{"/slurm/v0.0.40/job/submit":{},"/slurm/v0.0.41/job/submit":{},"/slurm/v0.0.41/jobs/":{},"/slurmdb/v0.0.41/jobs/":{}}}`))
	case r.URL.Path == "/slurm/v0.0.41/job/submit":
		_, _ = w.Write([]byte(`{"job_id":42,"step_id":"batch","errors":[],"warnings":[]}`))
	case r.URL.Path == "/slurm/v0.0.41/job/42" && r.Method == http.MethodGet:
		_, _ = w.Write([]byte(`{"jobs":[{"job_id":42,"job_state":["RUNNING"],"nodes":"n1","gres_detail":["gpu:1(IDX:3)"]}],"errors":[]}`))
	case strings.HasPrefix(r.URL.Path, "/slurm/v0.0.41/job/") && r.Method == http.MethodGet:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"jobs":[],"errors":[{"description":"Unable to find JobId","error_number":2017,"error":"Invalid job id specified"}]}`))
	case strings.HasPrefix(r.URL.Path, "/slurm/v0.0.41/job/") && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"errors":[{"error_number":2021,"error":"Job/step already completing or completed"}]}`))
	case strings.HasPrefix(r.URL.Path, "/slurm/v0.0.41/job/") && r.Method == http.MethodPost:
		_, _ = w.Write([]byte(`{"errors":[]}`))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeRESTD) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

// Over TCP the client authenticates by JWT, finds the newest version the
// server offers, speaks its shape, and reads a rotated token file.
func TestClientJWTDiscoveryAndShapes(t *testing.T) {
	fake := &fakeRESTD{token: "tok-1"}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("SLURM_JWT=tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := NewClient(ctx, ClientConfig{Endpoint: srv.URL, UserName: "taskmesh", TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version() != "v0.0.41" {
		t.Fatalf("version %s, want the newest offered (v0.0.41)", c.Version())
	}
	id, err := c.Submit(ctx, fullSpec)
	if err != nil || id != 42 {
		t.Fatalf("submit = %d, %v", id, err)
	}
	req := fake.last()
	if req.user != "taskmesh" || req.token != "tok-1" || req.path != "/slurm/v0.0.41/job/submit" {
		t.Fatalf("submit request %+v", req)
	}
	job := req.body["job"].(map[string]any)
	if job["tres_per_node"] != "gres/gpu:2" || job["script"] == nil || job["environment"].([]any)[0] != "A=1" {
		t.Fatalf("submit body is not v0.0.40's shape: %v", job)
	}
	j, err := c.Job(ctx, 42)
	if err != nil || j.State != StateRunning || j.GPUIndexes() != "3" {
		t.Fatalf("job = %+v, %v", j, err)
	}
	if _, err := c.Job(ctx, 7); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("unknown job: %v, want ErrJobNotFound", err)
	}
	if err := c.Cancel(ctx, 7); err != nil {
		t.Fatalf("cancelling an ended job: %v", err)
	}
	if err := c.EndAtTimeLimit(ctx, 42); err != nil || fake.last().body["time_limit"].(map[string]any)["number"] != 0.0 {
		t.Fatalf("end at time limit: %v, body %v", err, fake.last().body)
	}

	// The operator replaces the token: the next call carries the new one.
	fake.mu.Lock()
	fake.token = "tok-2"
	fake.mu.Unlock()
	time.Sleep(10 * time.Millisecond) // a different modification time
	if err := os.WriteFile(tokenFile, []byte("tok-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Job(ctx, 42); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if fake.last().token != "tok-2" {
		t.Fatalf("token %q after rotation", fake.last().token)
	}
	// A wrong token is a refusal, not a transient failure.
	if err := os.WriteFile(tokenFile, []byte("wrong, and longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Job(ctx, 42)
	var api *APIError
	if !errors.As(err, &api) || api.Status != http.StatusUnauthorized || Transient(err) {
		t.Fatalf("wrong token: %v (transient %v)", err, Transient(err))
	}
}

func TestClientConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []ClientConfig{
		{Endpoint: "slurmrestd:6820"},
		{Endpoint: "unix:"},
		{Endpoint: "http://"},
		{Endpoint: "http://127.0.0.1:1", Version: "v0.0.39"},
		{Endpoint: "http://127.0.0.1:1", Version: "v0.0.40", TokenFile: filepath.Join(t.TempDir(), "absent")},
	} {
		if _, err := NewClient(ctx, cfg); err == nil {
			t.Errorf("NewClient(%+v) accepted", cfg)
		}
	}
	// Unreachable: discovery fails, and calls fail as transient.
	if _, err := NewClient(ctx, ClientConfig{Endpoint: "unix:/nonexistent/slurmrestd.sock"}); err == nil {
		t.Error("discovery against nothing succeeded")
	}
	c, err := NewClient(ctx, ClientConfig{Endpoint: "unix:/nonexistent/slurmrestd.sock", Version: "v0.0.38"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Jobs(ctx); err == nil || !Transient(err) {
		t.Errorf("unreachable slurmrestd: %v (transient %v)", err, Transient(err))
	}
}

// Against the real slurmrestd (v0.0.38 on its unix socket): discovery,
// submission, the record, cancel, and an unknown job.
func TestClientAgainstSlurmrestd(t *testing.T) {
	cl := newWorld(t, ModeBatch).cluster
	ctx := context.Background()
	c, err := NewClient(ctx, ClientConfig{Endpoint: "unix:" + cl.Socket})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version() != cl.RESTVersion {
		t.Fatalf("discovered %s, the cluster serves %s", c.Version(), cl.RESTVersion)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := c.Submit(ctx, JobSpec{Name: "client-test", Comment: "not taskmesh's", Partition: cl.Partition, WorkDir: cl.JobDir,
		Env: map[string]string{"PATH": "/bin:/usr/bin"}, Script: "#!/bin/sh\nsleep 300\n", MemoryMB: 50, TimeLimitMin: 5, Nice: 10})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Job(ctx, id)
	if err != nil || j.Name != "client-test" || j.Comment != "not taskmesh's" || j.User != cl.RESTUser {
		t.Fatalf("job %+v, %v", j, err)
	}
	if err := c.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, id); err != nil {
		t.Fatalf("cancelling again: %v", err)
	}
	if err := c.EndAtTimeLimit(ctx, id); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("v0.0.38 end at time limit: %v", err)
	}
	if _, err := c.Job(ctx, 99999999); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}
