package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testModel is a small ONNX model (a Relu graph), protobuf encoded by hand.
func testModel() []byte {
	field := func(b []byte, num int, v []byte) []byte {
		b = append(b, byte(num<<3|2))
		b = append(b, byte(len(v)))
		return append(b, v...)
	}
	node := field(field(field(nil, 1, []byte("x")), 2, []byte("y")), 4, []byte("Relu"))
	graph := field(field(nil, 1, node), 2, []byte("dev"))
	return field(append([]byte{0x08, 0x08}, field(nil, 2, []byte("dev-test"))...), 7, graph)
}

func testQuant(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.Create("calib.bin")
	_, _ = w.Write([]byte("calibration"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func uploadInput(t *testing.T, base, key, kind string, data []byte) string {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("kind", kind)
	fw, _ := mw.CreateFormFile("file", kind+".bin")
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, base+"/jobs/uploads", &body)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	raw, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(raw, &out) != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("upload %s: %d %s", kind, resp.StatusCode, raw)
	}
	return out["key"].(string)
}

// Durability instead of the document's "crash is reset": `taskmesh dev` is
// killed (SIGKILL) while a job's BIE stage runs and started again; the
// stage's process carries on under its shim, the agent takes it up again,
// and the job completes.
func TestDevPipelineJobSurvivesAKill(t *testing.T) {
	// The killed process's Postgres server dies with it (it is started
	// with a parent-death signal) and must be reaped before a new server
	// may start on its data directory: this process adopts orphans so it
	// can reap it, whatever the machine's init does.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	dir, err := os.MkdirTemp("", "tmdevpipe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := [4]int{freePort(t), freePort(t), freePort(t), freePort(t)}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	// The BIE stage takes a while, so the kill lands in the middle of it.
	slow := `bie=["/bin/sh","-c","sleep 6 && exec \"$0\" pipeline-stage bie --workdir \"$1\"","{self}","{workdir}"]`
	// The restarted agent must attach to the stage's shim within the
	// orphan grace (two thirds of --agent-lost-after), or the shim stops
	// the stage ("orphaned") and it fails: by design, but not what this
	// test is about. A busy machine took longer than the default's 10 s
	// to start dev again.
	lostAfter := "60s"
	first := startDev(t, dir, ports, "--pipeline-program", slow, "--agent-lost-after", lostAfter)
	keyBytes, err := os.ReadFile(filepath.Join(dir, "demo-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyBytes))
	model := uploadInput(t, base, key, "model", testModel())
	quant := uploadInput(t, base, key, "quant", testQuant(t))
	created := rest(t, "POST", base+"/jobs", key, map[string]any{"model_key": model, "quant_key": quant})
	id := created["job_id"].(string)

	deadline := time.Now().Add(60 * time.Second)
	for {
		j := rest(t, "GET", base+"/jobs/"+id, key, nil)
		if tid, ok := j["stage_tasks"].(map[string]any)["bie"].(string); ok {
			if task := rest(t, "GET", base+"/api/v1/tasks/"+tid, key, nil); task["status"] == "running" {
				break
			}
		}
		if j["status"] == "FAILED" || time.Now().After(deadline) {
			t.Fatalf("the BIE stage never ran: %v", j)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	reapPostgres(t, filepath.Join(dir, "pg"))

	second := startDev(t, dir, ports, "--pipeline-program", slow, "--agent-lost-after", lostAfter)
	deadline = time.Now().Add(90 * time.Second)
	for {
		j := rest(t, "GET", base+"/jobs/"+id, key, nil)
		if j["status"] == "COMPLETED" {
			if out := j["output"].(map[string]any); out["nef_key"] != "jobs/"+id+"/output/result.nef" {
				t.Fatalf("completed without its NEF: %v", j)
			}
			break
		}
		if j["status"] == "FAILED" || time.Now().After(deadline) {
			t.Fatalf("after the restart the job is %v\n%s", j, second.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// An id the system does not know is the documented 404.
	req, _ := http.NewRequest(http.MethodGet, base+"/jobs/8a3c1f0e-4b2d-4c6e-9f7a-1b2c3d4e5f60", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(raw), `"code":"JOB_NOT_FOUND"`) {
		t.Errorf("unknown job: %d %s", resp.StatusCode, raw)
	}
	second.stop(t)
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// reapPostgres waits for the Postgres server of dataDir (its pid is the
// first line of postmaster.pid) to exit and reaps it.
func reapPostgres(t *testing.T, dataDir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return // it never wrote one, or removed it on the way out
	}
	var pid int
	if _, err := fmt.Sscan(strings.SplitN(string(b), "\n", 2)[0], &pid); err != nil || pid <= 0 {
		t.Fatalf("postmaster.pid: %q", b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if got == pid || err == syscall.ECHILD {
			return // reaped, or not ours to reap (someone else did)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the killed Postgres server (pid %d) did not exit", pid)
}
