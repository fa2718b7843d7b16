package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/buildtest"
)

// The binary takes `pipeline-stage`'s arguments with or without that word
// first, and a failure's reason is its last line on stderr.
func TestStageBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "taskmesh-stage")
	buildtest.Binary(t, ".", bin, "")
	work := t.TempDir()
	for _, args := range [][]string{
		{"noop", "--workdir", work, "out.onnx"},
		{"pipeline-stage", "noop", "--workdir", work, "out.bie"},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
	}
	for _, name := range []string{"out.onnx", "out.bie"} {
		if _, err := os.Stat(filepath.Join(work, name)); err != nil {
			t.Errorf("the no-op stage wrote no %s: %v", name, err)
		}
	}
	// The ONNX stand-in refuses a file that is not a model, with the reason.
	if err := os.WriteFile(filepath.Join(work, "model.onnx"), []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, "pipeline-stage", "onnx", "--workdir", work)
	cmd.Stderr = &stderr
	err := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if err == nil || !strings.HasPrefix(lines[len(lines)-1], "pipeline-stage: ") {
		t.Fatalf("onnx on a bad model: err %v, stderr %q; want exit 1 and the reason last", err, stderr.String())
	}
	if out, err := exec.Command(bin, "frobnicate").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown command") {
		t.Errorf("an unknown command: err %v, %q", err, out)
	}
}
