package scheduler

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Stages run through taskmesh-stage when it sits beside the executable,
// else through the executable itself; both as `<binary> pipeline-stage`.
func TestDefaultPipelineWorker(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "taskmesh")
	if got := DefaultPipelineWorker(exe); !slices.Equal(got, []string{exe, "pipeline-stage"}) {
		t.Errorf("without taskmesh-stage: %q, want the executable itself", got)
	}
	stage := filepath.Join(dir, "taskmesh-stage")
	if err := os.WriteFile(stage, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := DefaultPipelineWorker(exe); !slices.Equal(got, []string{stage, "pipeline-stage"}) {
		t.Errorf("with taskmesh-stage beside: %q, want it", got)
	}
}
