package e2e

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Inputs of pipeline jobs: a small ONNX model (a Relu graph) encoded by
// hand, and a real zip for quant.zip.

type pbuf []byte

func (b pbuf) varint(num int, v uint64) pbuf { return appendVarint(appendVarint(b, uint64(num<<3)), v) }

func (b pbuf) bytes(num int, v []byte) pbuf {
	return append(appendVarint(appendVarint(b, uint64(num<<3|2)), uint64(len(v))), v...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func onnxModel() []byte {
	node := pbuf{}.bytes(1, []byte("x")).bytes(2, []byte("y")).bytes(4, []byte("Relu"))
	graph := pbuf{}.bytes(1, node).bytes(2, []byte("e2e")).bytes(11, pbuf{}.bytes(1, []byte("x"))).bytes(12, pbuf{}.bytes(1, []byte("y")))
	return pbuf{}.varint(1, 8).bytes(2, []byte("e2e-exporter")).bytes(7, graph).bytes(8, pbuf{}.varint(2, 17))
}

func quantZip(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.Create("calibration/0001.npy")
	_, _ = w.Write([]byte("calibration data"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// startPools runs one agent of every pipeline pool (pool:onnx, pool:bie,
// pool:nef) with slots slots.
func (w *world) startPools(slots int) {
	w.t.Helper()
	w.startAgentSpec(agentSpec{AgentID: "pools", Token: w.agentToken("pools"), Slots: slots,
		Labels: []string{"pool:onnx", "pool:bie", "pool:nef"}})
}

// upload sends POST /jobs/uploads and returns the status and body.
func (w *world) upload(key, kind, filename string, data []byte) (int, map[string]any) {
	w.t.Helper()
	return w.uploadInOrder(key, kind, filename, data, false)
}

// uploadInOrder is upload with the file part before the kind field when
// fileFirst is set.
func (w *world) uploadInOrder(key, kind, filename string, data []byte, fileFirst bool) (int, map[string]any) {
	w.t.Helper()
	file := uploadPart{field: "file", filename: filename, data: data}
	switch {
	case kind == "":
		return w.uploadParts(key, file)
	case fileFirst:
		return w.uploadParts(key, file, uploadPart{field: "kind", data: []byte(kind)})
	}
	return w.uploadParts(key, uploadPart{field: "kind", data: []byte(kind)}, file)
}

// uploadPart is one part of a multipart upload body: a file part when it
// has a filename, else a field.
type uploadPart struct {
	field, filename string
	data            []byte
}

// uploadParts sends POST /jobs/uploads with these parts, in this order.
func (w *world) uploadParts(key string, parts ...uploadPart) (int, map[string]any) {
	w.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range parts {
		if p.filename == "" {
			_ = mw.WriteField(p.field, string(p.data))
			continue
		}
		fw, _ := mw.CreateFormFile(p.field, p.filename)
		_, _ = fw.Write(p.data)
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, w.s.HTTPURL+"/jobs/uploads", &body)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	raw, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(raw, &out) != nil {
		out["_raw"] = string(raw)
	}
	return resp.StatusCode, out
}

// mustUpload uploads and returns the key.
func (w *world) mustUpload(key, kind, filename string, data []byte) string {
	w.t.Helper()
	code, out := w.upload(key, kind, filename, data)
	if code != http.StatusOK || out["kind"] != kind || out["size"] != float64(len(data)) {
		w.t.Fatalf("upload %s: %d %v", kind, code, out)
	}
	return out["key"].(string)
}

// createJob uploads model and quant and creates a job on them.
func (w *world) createJob(key string, model []byte) string {
	w.t.Helper()
	m := w.mustUpload(key, "model", "model.onnx", model)
	q := w.mustUpload(key, "quant", "quant.zip", quantZip(w.t))
	code, out, _ := w.call(http.MethodPost, "/jobs", key, map[string]any{"model_key": m, "quant_key": q})
	if code != http.StatusOK || out["status"] != "ONNX" || len(out["job_id"].(string)) != 36 {
		w.t.Fatalf("create job: %d %v", code, out)
	}
	return out["job_id"].(string)
}

// waitJob polls GET /jobs/{id} until the job is final.
func (w *world) waitJob(key, id string, d time.Duration) map[string]any {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, j, _ := w.call(http.MethodGet, "/jobs/"+id, key, nil)
		if code != http.StatusOK {
			w.t.Fatalf("GET job: %d %v", code, j)
		}
		if j["status"] == "COMPLETED" || j["status"] == "FAILED" {
			return j
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("job %s still %v after %s: %v", id, j["status"], d, j)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sseFrame is one frame of a live stream.
type sseFrame struct {
	id, event string
	data      map[string]any
}

// follow reads GET path as SSE until the stream ends.
func (w *world) follow(key, path string, timeout time.Duration) []sseFrame {
	w.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, w.s.HTTPURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	client := &http.Client{Timeout: timeout}
	resp, err := client.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, _ := io.ReadAll(resp.Body)
		w.t.Fatalf("SSE %s: %d %s", path, resp.StatusCode, raw)
	}
	var frames []sseFrame
	var cur sseFrame
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				frames = append(frames, cur)
			}
			cur = sseFrame{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(line[6:]), &cur.data)
		}
	}
	return frames
}

// get fetches a URL without credentials (a signed link).
func get(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
