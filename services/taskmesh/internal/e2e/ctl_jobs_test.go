package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ctl"
)

// `taskmesh ctl jobs` through the gateway's front door: submit uploads the
// files and waits with stage bars, get shows the record, download fetches
// the results and logs through their signed links; a job that fails exits
// 1 with its step and reason.
func TestCtlJobsSubmitWatchGetDownload(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPools(4)
	key := w.tenantKey("acme")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	model, quant := write("model.onnx", onnxModel()), write("quant.zip", quantZip(t))
	refs := filepath.Join(dir, "refs")
	if err := os.Mkdir(refs, 0o755); err != nil {
		t.Fatal(err)
	}
	write("refs/cat.png", pngImage(t, 16, 16, false))
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		args = append(args, "--server", w.s.GRPCAddr, "--api-key", key)
		code := ctl.Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}

	out, errOut, code := run("jobs", "submit", "--model", model, "--quant", quant, "--ref-images", refs, "--wait")
	if code != 0 || !strings.Contains(out, "NEF [##########] 100%  COMPLETED") || !strings.HasPrefix(errOut, "job ") {
		t.Fatalf("submit --wait: exit %d\n%s\n%s", code, out, errOut)
	}
	id := strings.TrimSpace(strings.TrimPrefix(errOut, "job "))
	out, _, code = run("jobs", "get", id)
	if code != 0 || !strings.Contains(out, "status:      COMPLETED") || !strings.Contains(out, "nef_key:     jobs/"+id+"/output/result.nef") {
		t.Fatalf("get: exit %d\n%s", code, out)
	}
	// The directory is made when it is missing.
	dl := filepath.Join(dir, "out", "job")
	out, errOut, code = run("jobs", "download", id, "--dir", dl, "--logs")
	if code != 0 || strings.Count(out, " bytes\n") != 5 {
		t.Fatalf("download: exit %d\n%s%s", code, out, errOut)
	}
	nef, _ := os.ReadFile(filepath.Join(dl, "result.nef"))
	bie, _ := os.ReadFile(filepath.Join(dl, "result.bie"))
	checkNEF(t, nef, bie)
	if log, _ := os.ReadFile(filepath.Join(dl, "bie.log")); !strings.Contains(string(log), "1 reference images") {
		t.Errorf("bie.log: %s", log)
	}

	// A model file that is not there is a usage error; nothing is sent.
	if _, errOut, code = run("jobs", "submit", "--model", filepath.Join(dir, "missing.onnx"), "--quant", quant); code != ctl.ExitUsage ||
		!strings.Contains(errOut, "--model") {
		t.Errorf("a missing model file: exit %d: %s", code, errOut)
	}
	bad := write("bad.onnx", []byte("\x08\x07\x12\x03abc not a model"))
	_, errOut, code = run("jobs", "submit", "--model", bad, "--quant", quant, "--wait")
	if code != ctl.ExitError || !strings.Contains(errOut, "FAILED in its onnx stage: bad.onnx") && !strings.Contains(errOut, "FAILED in its onnx stage: model.onnx is not an ONNX model") {
		t.Errorf("a failing job: exit %d: %s", code, errOut)
	}
	_, errOut, code = run("jobs", "get", "00000000-0000-4000-8000-000000000000")
	if code != ctl.ExitError || !strings.Contains(errOut, "job not found") {
		t.Errorf("unknown job: exit %d: %s", code, errOut)
	}
	_, errOut, code = run("jobs", "submit", "--model", model)
	if code != ctl.ExitUsage {
		t.Errorf("no --quant: exit %d: %s", code, errOut)
	}
}
