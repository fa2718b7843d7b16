package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// A job goes through ONNX → BIE → NEF on the local agent's pools with the
// stand-in programs, its stages stream live, and its results and logs are
// downloadable; the NEF is the BIE packaged with its checksum.
func TestPipelineJobCompletesAndStreamsItsStages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPools(4)
	key := w.tenantKey("acme")
	img := w.mustUpload(key, "ref_image", "cat.png", pngImage(t, 16, 16, false))
	m := w.mustUpload(key, "model", "resnet.onnx", onnxModel())
	q := w.mustUpload(key, "quant", "quant.zip", quantZip(t))
	code, out, _ := w.call(http.MethodPost, "/jobs", key, map[string]any{"model_key": m, "quant_key": q, "ref_image_keys": []string{img}})
	if code != http.StatusOK || out["status"] != "ONNX" || len(out) != 2 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["job_id"].(string)
	// The submission is audited with the client's address, as every change
	// a client made is (docs/api/audit.md).
	var created []any
	waitFor(t, 30*time.Second, "job.created in the audit log", func() bool {
		_, body, _ := w.call(http.MethodGet, "/api/v1/audit-logs?resource=job&action=created&resource_id="+id, key, nil)
		created, _ = body["audit_logs"].([]any)
		return len(created) == 1
	})
	if e := created[0].(map[string]any); e["action"] != "job.created" || e["ip"] != "127.0.0.1" || e["user_id"] == "" {
		t.Errorf("the job's audit entry = %v, want job.created by its key from 127.0.0.1", e)
	}

	frames := w.follow(key, "/jobs/"+id+"/events", 2*time.Minute)
	if len(frames) < 4 {
		t.Fatalf("only %d frames: %v", len(frames), frames)
	}
	seen := map[string]bool{}
	for i, f := range frames {
		seen[f.data["status"].(string)] = true
		if i > 0 && f.id <= frames[i-1].id && len(f.id) == len(frames[i-1].id) {
			t.Errorf("frame ids not increasing: %s after %s", f.id, frames[i-1].id)
		}
	}
	last := frames[len(frames)-1]
	if last.data["status"] != "COMPLETED" || last.data["final"] != true || !seen["ONNX"] || !seen["BIE"] || !seen["NEF"] {
		t.Fatalf("frames went through %v, last %v", seen, last)
	}

	_, j, _ := w.call(http.MethodGet, "/jobs/"+id, key, nil)
	outKeys := j["output"].(map[string]any)
	if j["status"] != "COMPLETED" || j["stage"] != "NEF" || j["progress"] != float64(100) || j["error"] != nil ||
		outKeys["bie_key"] != "jobs/"+id+"/output/result.bie" || outKeys["nef_key"] != "jobs/"+id+"/output/result.nef" {
		t.Fatalf("job %v", j)
	}
	for _, k := range []string{"job_id", "status", "output", "created_at", "stage", "progress", "updated_at", "error"} {
		if _, ok := j[k]; !ok {
			t.Errorf("GET lacks %s: %v", k, j)
		}
	}
	// The stage tasks are ordinary tasks of the tenant, each on its pool.
	ran := map[string]float64{} // each stage's running time, as its task shows it
	for stage, tid := range j["stage_tasks"].(map[string]any) {
		task := w.task(key, tid.(string))
		if task["status"] != "completed" || !strings.Contains(fmt.Sprint(task["distribution"]), "pool:"+stage) {
			t.Errorf("%s task %v", stage, task)
		}
		started, errS := time.Parse(time.RFC3339Nano, fmt.Sprint(task["started_at"]))
		ended, errE := time.Parse(time.RFC3339Nano, fmt.Sprint(task["ended_at"]))
		if errS != nil || errE != nil {
			t.Fatalf("%s task's times: %v, %v", stage, errS, errE)
		}
		ran[stage] = ended.Sub(started).Seconds()
	}

	// Their running time is metered as stage seconds, per stage, and not
	// as CPU seconds as well. It counts from the start the scheduler
	// recorded, so a stage that ended before its agent's StartTask was
	// recorded meters 0 s (docs/api/tasks.md#agent-protocol): the
	// figure compared is the task's own, not a positive one.
	var rows []any
	metered := func() error {
		_, u, _ := w.call(http.MethodGet, "/api/v1/usage?group_by=stage", key, nil)
		rows, _ = u["rows"].([]any)
		byKey := map[string]map[string]any{}
		for _, r := range rows {
			row := r.(map[string]any)
			byKey[fmt.Sprint(row["key"])] = row
		}
		for _, stage := range []string{"onnx", "bie", "nef"} {
			row := byKey[stage]
			if row == nil {
				return fmt.Errorf("no row for %s", stage)
			}
			secs, _ := row["stage_seconds"].(float64)
			if fmt.Sprint(row["items"]) != "1" || row["cpu_seconds"] != float64(0) || math.Abs(secs-ran[stage]) > 1e-5 {
				return fmt.Errorf("%s row %v, want 1 item of %.6f stage seconds (the task's own) and no CPU seconds", stage, row, ran[stage])
			}
		}
		return nil
	}
	var unmetered error
	func() {
		defer func() {
			if unmetered != nil {
				t.Logf("the usage by stage last read: %v (rows %v)", unmetered, rows)
			}
		}()
		waitFor(t, 30*time.Second, "stage seconds of every stage", func() bool {
			unmetered = metered()
			return unmetered == nil
		})
	}()

	_, dl, _ := w.call(http.MethodGet, "/jobs/"+id+"/downloads", key, nil)
	code, nef := get(t, dl["nef_url"].(string))
	if code != http.StatusOK {
		t.Fatalf("NEF download: %d", code)
	}
	_, bie := get(t, dl["bie_url"].(string))
	checkNEF(t, nef, bie)
	// The job itself links to its results, beside their keys.
	for _, name := range []string{"bie", "nef"} {
		u, _ := outKeys[name+"_url"].(string)
		code, body := get(t, u)
		if want := map[string][]byte{"bie": bie, "nef": nef}[name]; code != http.StatusOK || !bytes.Equal(body, want) {
			t.Errorf("the job's %s_url %q: %d, %d bytes; want the %d of the downloads' link", name, u, code, len(body), len(want))
		}
	}
	logs := dl["logs"].(map[string]any)
	for _, s := range []string{"onnx", "bie", "nef"} {
		code, body := get(t, logs[s].(string))
		if code != http.StatusOK || !strings.Contains(string(body), "pipeline-stage "+s) {
			t.Errorf("%s log: %d %q", s, code, body)
		}
	}
	if _, body := get(t, logs["bie"].(string)); !strings.Contains(string(body), "1 reference images") {
		t.Errorf("the BIE stage did not see the reference image: %s", body)
	}
	// The documented layout, in the filesystem object store.
	for _, p := range []string{"input/model.onnx", "input/quant.zip", "input/ref_images/01-cat.png", "work/out.onnx",
		"output/result.bie", "output/result.nef", "logs/onnx.log", "logs/bie.log", "logs/nef.log"} {
		if _, err := os.Stat(filepath.Join(w.s.ObjectDir, "objects", "jobs", id, p)); err != nil {
			t.Errorf("layout: %v", err)
		}
	}
	// A client resuming after the final frame is told there is no more.
	req, _ := http.NewRequest(http.MethodGet, w.s.HTTPURL+"/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Last-Event-ID", last.id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("resume past the end: %d", resp.StatusCode)
	}
}

// checkNEF reads a NEF: a zip of model.bie (the BIE result) and a
// manifest with its SHA-256.
func checkNEF(t *testing.T, nef, bie []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(nef), int64(len(nef)))
	if err != nil {
		t.Fatalf("the NEF is not a zip: %v", err)
	}
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		files[f.Name], _ = io.ReadAll(rc)
		rc.Close()
	}
	if !bytes.Equal(files["model.bie"], bie) || !bytes.HasPrefix(bie, []byte("TMBIE1\n")) ||
		!strings.Contains(string(files["manifest.json"]), `"model.bie"`) {
		t.Errorf("NEF holds %d files, model.bie %d bytes, BIE %d bytes", len(files), len(files["model.bie"]), len(bie))
	}
}

// Bad input gets the documented error and creates nothing; tenants see
// nothing of each other's uploads, jobs and links.
func TestPipelineRefusesBadInputAndIsolatesTenants(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPools(4)
	acme, other := w.tenantKey("acme"), w.tenantKey("other")
	expect := func(what string, code int, out map[string]any, wantCode int, wantErr, wantMsg string) {
		t.Helper()
		if code != wantCode || out["code"] != wantErr || !strings.Contains(fmt.Sprint(out["message"]), wantMsg) || len(out) != 2 {
			t.Errorf("%s: %d %v, want %d %s %q", what, code, out, wantCode, wantErr, wantMsg)
		}
	}
	code, out := w.upload(acme, "model", "x.onnx", []byte("this is a text file"))
	expect("non-ONNX upload", code, out, 400, "InvalidParameter", "is not an ONNX model")
	code, out = w.upload(acme, "weights", "x.onnx", onnxModel())
	expect("unknown kind", code, out, 400, "InvalidParameter", "kind")
	code, out = w.upload(acme, "", "x.onnx", onnxModel())
	expect("no kind", code, out, 400, "InvalidParameter", "kind field")
	code, out = w.uploadInOrder(acme, "model", "x.onnx", []byte("this is a text file"), true)
	expect("non-ONNX upload, file part first", code, out, 400, "InvalidParameter", "is not an ONNX model")
	code, out = w.upload(acme, "quant", "q.zip", []byte("PK\x03\x04 cut short"))
	expect("broken zip", code, out, 400, "InvalidParameter", "zip")
	// A reference image is judged whole, not by its first bytes.
	code, out = w.upload(acme, "ref_image", "notes.txt", []byte("BMW is a car, not an image at all.\n"))
	expect("text that starts BM", code, out, 400, "InvalidParameter", "is not a JPEG, PNG, BMP or WEBP image")
	// A whole 1×1 GIF89a: an image, of a format the stages do not take.
	gif1x1 := []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")
	code, out = w.upload(acme, "ref_image", "dot.gif", gif1x1)
	expect("a GIF", code, out, 400, "InvalidParameter", "is a gif image; a reference image is JPEG, PNG, BMP or WEBP")
	code, out = w.upload(acme, "ref_image", "junk.png", append([]byte("\x89PNG\r\n\x1a\n"), "junk junk junk junk"...))
	expect("a PNG signature and junk", code, out, 400, "InvalidParameter", "is not a whole png image")
	code, out = w.upload(acme, "ref_image", "junk.webp", append([]byte("RIFF\x20\x00\x00\x00WEBP"), "junk junk junk junk"...))
	expect("a WEBP header and junk", code, out, 400, "InvalidParameter", "is not a whole webp image")
	cut := pngImage(t, 64, 64, false)
	code, out = w.upload(acme, "ref_image", "cut.png", cut[:len(cut)-16])
	expect("a PNG cut short", code, out, 400, "InvalidParameter", "is not a whole png image")
	code, out = w.upload(acme, "ref_image", "big.png", append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 33<<20)...))
	expect("too large", code, out, 413, "RequestTooLarge", "at most")
	code, out, _ = w.call(http.MethodPost, "/jobs/uploads", acme, `{"kind":"model"}`)
	expect("not multipart", code, out, 400, "InvalidParameter", "multipart/form-data")
	kind := uploadPart{field: "kind", data: []byte("model")}
	file := uploadPart{field: "file", filename: "m.onnx", data: onnxModel()}
	code, out = w.uploadParts(acme, kind, file, file)
	expect("a second file part", code, out, 400, "InvalidParameter", "more than one file part")
	code, out = w.uploadParts(acme, file, kind, file)
	expect("a second file part after a spooled one", code, out, 400, "InvalidParameter", "more than one file part")
	code, out = w.uploadParts(acme, kind, file, kind)
	expect("a field after the file part", code, out, 400, "InvalidParameter", `unexpected form field "kind" after the file part`)
	if n := countRows(t, w, scheduler.PipelineSchema, "uploads"); n != 0 {
		t.Fatalf("%d uploads kept of refused bodies", n)
	}

	m := w.mustUpload(acme, "model", "m.onnx", onnxModel())
	// The parts in either order: a file part before its kind is kept
	// until the kind arrives.
	if code, out := w.uploadInOrder(acme, "model", "m2.onnx", onnxModel(), true); code != 200 || out["kind"] != "model" ||
		out["size"] != float64(len(onnxModel())) || out["key"] == m || !strings.HasPrefix(fmt.Sprint(out["key"]), "uploads/") {
		t.Errorf("upload with the file part first = %d %v", code, out)
	}
	q := w.mustUpload(acme, "quant", "q.zip", quantZip(t))
	for _, c := range []struct {
		what, body, msg string
	}{
		{"malformed JSON", `{"model_key":`, "malformed JSON body: unexpected EOF"},
		{"data after JSON", `{"model_key":"` + m + `","quant_key":"` + q + `"} {}`, "unexpected data after"},
		{"unknown field", `{"model_key":"` + m + `","quant_key":"` + q + `","priority":1}`, "priority"},
		{"missing quant_key", `{"model_key":"` + m + `"}`, "quant_key: is required"},
		{"kinds swapped", `{"model_key":"` + q + `","quant_key":"` + m + `"}`, "is a quant, not a model"},
	} {
		code, out, _ := w.call(http.MethodPost, "/jobs", acme, c.body)
		expect(c.what, code, out, 400, "InvalidParameter", c.msg)
	}
	// Nothing was created by any of these.
	if n := countRows(t, w, scheduler.PipelineSchema, "jobs"); n != 0 {
		t.Fatalf("%d jobs stored", n)
	}
	// A key that names no upload of the tenant, its own unknown one or
	// another tenant's, is taken as the design has it (inputs put in the
	// store by the client): the job is created and fails at its ONNX
	// stage, which finds no input. Nothing of the other tenant's is read.
	for _, c := range []struct{ what, bearer, model, quant string }{
		{"an unknown key", acme, "jobs/0b7c1d2e-0000-4000-8000-000000000001/input/model.onnx", q},
		{"another tenant's keys", other, m, q},
	} {
		code, out, _ := w.call(http.MethodPost, "/jobs", c.bearer, map[string]any{"model_key": c.model, "quant_key": c.quant})
		if code != http.StatusOK || out["status"] != "ONNX" || len(fmt.Sprint(out["job_id"])) != 36 {
			t.Fatalf("%s: create = %d %v, want 200 ONNX", c.what, code, out)
		}
		j := w.waitJob(c.bearer, out["job_id"].(string), 60*time.Second)
		e, _ := j["error"].(map[string]any)
		if j["status"] != "FAILED" || e["step"] != "onnx" || !strings.Contains(fmt.Sprint(e["reason"]), "404") {
			t.Fatalf("%s: job = %v, want FAILED at onnx for want of its input", c.what, j)
		}
	}

	id := w.createJob(acme, onnxModel())
	for _, c := range []struct{ path, bearer string }{
		{"/jobs/" + id, other}, {"/jobs/" + id + "/downloads", other}, {"/jobs/" + id + "/events", other},
		{"/jobs/00000000-0000-4000-8000-000000000000", acme}, {"/jobs/not-a-uuid", acme},
	} {
		code, out, _ := w.call(http.MethodGet, c.path, c.bearer, nil)
		expect(c.path, code, out, 404, "JOB_NOT_FOUND", "job not found")
	}
	code, out, _ = w.call(http.MethodGet, "/jobs/"+id, "", nil)
	expect("no key", code, out, 401, "InvalidApiKey", "")
	code, out, _ = w.call(http.MethodGet, "/jobs/"+id, w.agentToken("agent-x"), nil)
	expect("an agent token", code, out, 403, "AccessDenied", "")
	code, out, _ = w.call(http.MethodDelete, "/jobs/"+id, acme, nil)
	expect("DELETE", code, out, 405, "MethodNotAllowed", "")
	w.waitJob(acme, id, 2*time.Minute)
	// A signed link is bound to its object: another key is refused.
	_, dl, _ := w.call(http.MethodGet, "/jobs/"+id+"/downloads", acme, nil)
	forged := strings.Replace(dl["nef_url"].(string), "/output/result.nef?", "/output/result.bie?", 1)
	if code, _ := get(t, forged); code != http.StatusForbidden {
		t.Errorf("a link edited to another object: %d", code)
	}
}

func countRows(t *testing.T, w *world, schema, table string) int {
	t.Helper()
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A model that starts like a ModelProto but is not one passes the upload
// check and fails the ONNX stage: the job is FAILED with the stage and the
// stand-in's reason, and the stage's log is kept.
func TestPipelineFailedStageFailsTheJob(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPools(4)
	key := w.tenantKey("acme")
	id := w.createJob(key, []byte("\x08\x07\x12\x03abc this is no model"))
	j := w.waitJob(key, id, 2*time.Minute)
	e, _ := j["error"].(map[string]any)
	if j["status"] != "FAILED" || j["stage"] != "ONNX" || e["step"] != "onnx" ||
		!strings.HasPrefix(fmt.Sprint(e["reason"]), "model.onnx is not an ONNX model:") {
		t.Fatalf("job %v", j)
	}
	if out := j["output"].(map[string]any); out["bie_key"] != nil || out["nef_key"] != nil || out["bie_url"] != nil || out["nef_url"] != nil {
		t.Errorf("a failed job has results: %v", out)
	}
	_, dl, _ := w.call(http.MethodGet, "/jobs/"+id+"/downloads", key, nil)
	logs := dl["logs"].(map[string]any)
	code, body := get(t, fmt.Sprint(logs["onnx"]))
	if code != http.StatusOK || !strings.Contains(string(body), "FAILED: model.onnx is not an ONNX model") || logs["bie"] != nil {
		t.Errorf("onnx log: %d %s; logs %v", code, body, logs)
	}
}

// Ten jobs queued at once with a BIE cap of 2, on three agents of the BIE
// pool with four slots each (twelve BIE slots): never more than two BIE stages run at once,
// as the scheduler's event log shows, and every job completes.
func TestPipelineBIECapHoldsAcrossAgents(t *testing.T) {
	t.Parallel()
	slowBIE := scheduler.PipelineStage{Queue: "pipeline-bie", Resource: "taskmesh.io/pipeline-bie",
		Program: []string{"/bin/sh", "-c", `sleep 0.4 && exec "$0" pipeline-stage bie --workdir "$1"`, "{self}", "{workdir}"}}
	// No agent is lost here: an agent-lost time of 30 s (not the tests'
	// usual 3 s) keeps a heartbeat held up on a loaded machine from
	// failing a stage, which is not what this test is about.
	w := newWorldWith(t, stack.Options{PipelineCaps: map[string]int{"bie": 2},
		Timing:   scheduler.Timing{AgentLostAfter: 30 * time.Second, SweepInterval: 200 * time.Millisecond},
		Pipeline: &scheduler.PipelineConfig{Stages: map[string]scheduler.PipelineStage{"bie": slowBIE}}})
	w.startPools(4)
	for i := range 2 {
		id := fmt.Sprintf("bie-%d", i)
		w.startAgentSpec(agentSpec{AgentID: id, Token: w.agentToken(id), Slots: 4, Labels: []string{"pool:bie"}})
	}
	key := w.tenantKey("acme")
	m := w.mustUpload(key, "model", "m.onnx", onnxModel())
	q := w.mustUpload(key, "quant", "q.zip", quantZip(t))
	ids := make([]string, 10)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, _ := w.call(http.MethodPost, "/jobs", key, map[string]any{"model_key": m, "quant_key": q})
			if code != http.StatusOK {
				t.Errorf("create: %d %v", code, out)
				return
			}
			ids[i] = out["job_id"].(string)
		}()
	}
	wg.Wait()
	var bieTasks []string
	for _, id := range ids {
		j := w.waitJob(key, id, 3*time.Minute)
		if j["status"] != "COMPLETED" {
			t.Fatalf("job %s: %v", id, j)
		}
		bieTasks = append(bieTasks, j["stage_tasks"].(map[string]any)["bie"].(string))
	}
	peak, agents := peakRunning(t, w, bieTasks)
	if peak > 2 {
		t.Fatalf("%d BIE stages ran at once with a cap of 2", peak)
	}
	if peak < 2 {
		t.Errorf("the BIE stages never ran two at once (peak %d): the test shows nothing", peak)
	}
	t.Logf("BIE stages: peak %d at once, on agents %v", peak, agents)
}

// peakRunning reads the tasks' TaskStarted and TaskSucceeded/TaskFailed
// events from the scheduler's event store and returns the most that were
// running at once, and the agents that ran them.
func peakRunning(t *testing.T, w *world, tasks []string) (int, []string) {
	t.Helper()
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(context.Background(), `SELECT event_type, occurred_at FROM events
		WHERE aggregate_id = ANY($1) AND event_type IN ('TaskStarted', 'TaskSucceeded', 'TaskFailed')`, tasks)
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		at    time.Time
		delta int
	}
	var changes []change
	for rows.Next() {
		var typ string
		var at time.Time
		if err := rows.Scan(&typ, &at); err != nil {
			t.Fatal(err)
		}
		d := -1
		if typ == "TaskStarted" {
			d = 1
		}
		changes = append(changes, change{at, d})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2*len(tasks) {
		t.Fatalf("%d start and end events for %d tasks", len(changes), len(tasks))
	}
	// An end at the same instant as a start counts first.
	sort.Slice(changes, func(i, j int) bool {
		if !changes[i].at.Equal(changes[j].at) {
			return changes[i].at.Before(changes[j].at)
		}
		return changes[i].delta < changes[j].delta
	})
	peak, now := 0, 0
	for _, c := range changes {
		now += c.delta
		peak = max(peak, now)
	}
	var agents []string
	arows, err := pool.Query(context.Background(), `SELECT DISTINCT doc->>'assigned_agent_id' FROM tasks WHERE id = ANY($1)`, tasks)
	if err == nil {
		for arows.Next() {
			var a string
			_ = arows.Scan(&a)
			agents = append(agents, a)
		}
		arows.Close()
	}
	return peak, agents
}
