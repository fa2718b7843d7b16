package ctl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
)

// fakePipeline answers GetJob from a script of job states (the last one
// repeats); its UploadJobInput reads the header and then never answers.
type fakePipeline struct {
	pipelinev1.UnimplementedPipelineServiceServer
	mu   sync.Mutex
	jobs []*pipelinev1.Job
}

func (p *fakePipeline) GetJob(_ context.Context, r *pipelinev1.GetJobRequest) (*pipelinev1.GetJobResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	j := p.jobs[0]
	if len(p.jobs) > 1 {
		p.jobs = p.jobs[1:]
	}
	return &pipelinev1.GetJobResponse{Job: j}, nil
}

func (p *fakePipeline) UploadJobInput(s grpc.ClientStreamingServer[pipelinev1.UploadJobInputRequest, pipelinev1.UploadJobInputResponse]) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

func jobFiles(t *testing.T) (model, quant string) {
	t.Helper()
	dir := t.TempDir()
	model, quant = filepath.Join(dir, "m.onnx"), filepath.Join(dir, "q.zip")
	for _, f := range []string{model, quant} {
		if err := os.WriteFile(f, []byte("bytes"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return model, quant
}

// The upload of jobs submit is bounded by --timeout as every request is,
// whether the server never answers at all or takes the upload and then
// hangs.
func TestJobsSubmitTimeout(t *testing.T) {
	model, quant := jobFiles(t)
	hanging := serve(t, func(s *grpc.Server) { pipelinev1.RegisterPipelineServiceServer(s, &fakePipeline{}) })
	for name, addr := range map[string]string{"silent server": silentServer(t), "hanging upload": hanging} {
		t.Run(name, func(t *testing.T) {
			r, took := testApp(EnvAPIKey, "k").runFor(t, 30*time.Second, "jobs", "submit", "--model", model, "--quant", quant,
				"--server", addr, "--timeout", "300ms")
			want := "error: uploading " + model + ": no answer from the server within 300ms (code 504 deadline exceeded)"
			if r.code != ExitError || strings.TrimSpace(r.stderr) != want {
				t.Fatalf("exit %d after %s, stderr:\n%s\nwant %q", r.code, took, r.stderr, want)
			}
			if took > 5*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

// jobs watch -o json prints each change as the whole job on one line.
func TestJobsWatchJSONLines(t *testing.T) {
	p := &fakePipeline{jobs: []*pipelinev1.Job{
		{JobId: "j1", Status: "ONNX", Stage: "ONNX", Progress: 50},
		{JobId: "j1", Status: "ONNX", Stage: "ONNX", Progress: 50},
		{JobId: "j1", Status: "COMPLETED", Stage: "NEF", Progress: 100},
	}}
	addr := serve(t, func(s *grpc.Server) { pipelinev1.RegisterPipelineServiceServer(s, p) })
	r := testApp(EnvAPIKey, "k").run(t, "", "jobs", "watch", "j1", "--server", addr, "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := lines(r.stdout)
	var statuses []string
	for _, l := range got {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", l, err)
		}
		if m["job_id"] != "j1" {
			t.Errorf("line %q has no job_id j1", l)
		}
		statuses = append(statuses, m["status"].(string))
	}
	if strings.Join(statuses, ",") != "ONNX,COMPLETED" {
		t.Errorf("statuses %v, want ONNX then COMPLETED:\n%s", statuses, r.stdout)
	}
}
