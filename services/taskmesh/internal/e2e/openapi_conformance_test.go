package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A client generated from GET /openapi.json must read every answer the
// API gives: each body is checked against its operation's schema for the
// status it came with — JSON types, 64-bit integers as strings, null only
// where the document allows it, and no field the document does not
// declare. The routes are the ones users meet most: tasks through their
// life, the agent protocol, groups, templates, video, jobs and the
// operator's lists, and their refusals.
func TestAnswersMatchTheServedOpenAPIDocument(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	status, docBody := w.send("GET", "/openapi.json", key, "", nil)
	if status != 200 {
		t.Fatalf("openapi.json: %d", status)
	}
	doc := newConformance(t, docBody)

	checked := 0
	call := func(method, path, bearer string, body any) map[string]any {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		var code int
		var out []byte
		if rd == nil {
			code, out = w.send(method, path, bearer, "", nil)
		} else {
			code, out = w.send(method, path, bearer, "application/json", rd)
		}
		for _, v := range doc.check(method, path, code, out) {
			t.Errorf("%s %s → %d: %s", method, path, code, v)
		}
		checked++
		m := map[string]any{}
		_ = json.Unmarshal(out, &m)
		return m
	}

	// A task through its life over the agent protocol.
	agent := "conformance-agent"
	tok := w.agentToken(agent)
	created := call("POST", "/api/v1/tasks", key, map[string]any{"name": "conform", "command": "echo", "args": []any{"hi"},
		"machine_id": agent})
	id, _ := created["id"].(string)
	if id == "" {
		t.Fatalf("create: %v", created)
	}
	call("GET", "/api/v1/tasks/"+id, key, nil)
	call("GET", "/api/v1/tasks", key, nil)
	call("GET", "/api/v1/tasks?status=pending", key, nil)
	claim := call("POST", "/api/v1/agent/tasks/claim", tok, map[string]any{"agent_id": agent, "machine_id": agent, "limit": 1, "wait": "5s"})
	tasks, _ := claim["tasks"].([]any)
	if len(tasks) != 1 {
		t.Fatalf("claim: %v", claim)
	}
	attempt := tasks[0].(map[string]any)["attempt_id"]
	call("POST", "/api/v1/agent/tasks/"+id+"/start", tok, map[string]any{"agent_id": agent, "attempt_id": attempt})
	call("POST", "/api/v1/agent/tasks/"+id+"/lease/renew", tok, map[string]any{"agent_id": agent, "attempt_id": attempt})
	call("POST", "/api/v1/agent/tasks/"+id+"/progress", tok, map[string]any{"agent_id": agent, "attempt_id": attempt, "progress": 50})
	call("GET", "/api/v1/tasks/"+id, key, nil)
	call("POST", "/api/v1/agent/tasks/"+id+"/complete", tok, map[string]any{"agent_id": agent, "attempt_id": attempt,
		"exit_code": 0, "stdout": "hi\n"})
	call("POST", "/api/v1/agent/tasks/"+id+"/start", tok, map[string]any{"agent_id": agent, "attempt_id": "other"}) // 409
	call("GET", "/api/v1/tasks/"+id, key, nil)
	call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	// The ended task's live streams: every SSE frame and WebSocket
	// message up to the final one.
	for _, frame := range w.sseFrames(key, "/api/v1/tasks/"+id+"/events") {
		for _, v := range doc.check("GET", "/api/v1/tasks/"+id+"/events", 200, frame) {
			t.Errorf("SSE frame of task %s: %s", id, v)
		}
		checked++
	}
	for _, msg := range w.wsMessages(key, "/api/v1/tasks/"+id+"/ws") {
		for _, v := range doc.check("GET", "/api/v1/tasks/"+id+"/ws", 101, msg) {
			t.Errorf("WebSocket message of task %s: %s", id, v)
		}
		checked++
	}
	call("POST", "/api/v1/tasks/"+id+"/retry", key, map[string]any{})

	// One changed, then cancelled, and refusals.
	other := call("POST", "/api/v1/tasks", key, map[string]any{"name": "conform-2", "command": "true", "machine_id": "nowhere"})
	otherID, _ := other["id"].(string)
	call("PUT", "/api/v1/tasks/"+otherID, key, map[string]any{"priority": 2})
	call("POST", "/api/v1/tasks/"+otherID+"/cancel", key, map[string]any{})
	call("POST", "/api/v1/tasks/"+otherID+"/cancel", key, map[string]any{}) // 409
	call("GET", "/api/v1/tasks/no-such-task", key, nil)                     // 404
	call("POST", "/api/v1/tasks", key, map[string]any{"name": "x"})         // 400
	call("GET", "/api/v1/tasks", "", nil)                                   // 401

	// Groups and templates.
	group := call("POST", "/api/v1/task-groups", key, map[string]any{"name": "conform-dag", "mode": "dag", "tasks": []any{
		map[string]any{"id": "a", "name": "a", "command": "true", "machine_id": "nowhere"},
		map[string]any{"id": "b", "name": "b", "command": "true", "machine_id": "nowhere", "depends_on": []any{"a"}}}})
	if gid, _ := group["id"].(string); gid != "" {
		call("GET", "/api/v1/task-groups/"+gid, key, nil)
		call("POST", "/api/v1/task-groups/"+gid+"/start", key, map[string]any{})
		call("POST", "/api/v1/task-groups/"+gid+"/cancel", key, map[string]any{})
		for _, frame := range w.sseFrames(key, "/api/v1/task-groups/"+gid+"/events") {
			for _, v := range doc.check("GET", "/api/v1/task-groups/"+gid+"/events", 200, frame) {
				t.Errorf("SSE frame of group %s: %s", gid, v)
			}
			checked++
		}
	}
	call("POST", "/api/v1/task-groups", key, map[string]any{"repeat": map[string]any{"count": 2, "parallel": 1,
		"template": map[string]any{"name": "rep", "command": "true", "machine_id": "nowhere"}}})
	call("GET", "/api/v1/task-groups", key, nil)
	call("POST", "/api/v1/templates", key, map[string]any{"id": "conform-tpl", "name": "tpl", "command": "echo", "args": []any{"{{msg}}"},
		"variables": []any{map[string]any{"name": "msg", "type": "string", "default": "hi"}}})
	call("GET", "/api/v1/templates/conform-tpl", key, nil)
	call("GET", "/api/v1/templates", key, nil)
	call("POST", "/api/v1/templates/conform-tpl/run", key, map[string]any{"variables": map[string]any{"msg": "yo"}})

	// Video: queued and unknown generations.
	video := call("POST", "/api/v1/video/generations", key, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "a cat"}})
	if out, _ := video["output"].(map[string]any); out != nil {
		if vid, _ := out["task_id"].(string); vid != "" {
			call("GET", "/api/v1/video/generations/"+vid, key, nil)
		}
	}
	call("GET", "/api/v1/video/generations/7b1f6c2e-0000-4000-8000-000000000000", key, nil)

	// A conversion job as it starts.
	job := call("POST", "/jobs", key, map[string]any{"model_key": w.mustUpload(key, "model", "model.onnx", onnxModel()),
		"quant_key": w.mustUpload(key, "quant", "quant.zip", quantZip(t))})
	if jid, _ := job["job_id"].(string); jid != "" {
		call("GET", "/jobs/"+jid, key, nil)
	}
	call("GET", "/jobs/7b1f6c2e-0000-4000-8000-000000000000", key, nil) // 404

	// The operator's lists and the tenant's webhooks, usage and audit.
	call("GET", "/api/v1/admin/agents", op, nil)
	call("GET", "/api/v1/admin/agents/"+agent, op, nil)
	call("GET", "/api/v1/admin/tenants/demo/api-keys", op, nil)
	call("GET", "/api/v1/quotas", op, nil)
	call("GET", "/api/v1/webhook-deliveries", key, nil)
	call("GET", "/api/v1/usage", key, nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		audit := call("GET", "/api/v1/audit-logs", key, nil)
		if logs, _ := audit["audit_logs"].([]any); len(logs) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if checked < 40 {
		t.Errorf("only %d answers checked", checked)
	}
}

// conformance checks answers against an OpenAPI 2.0 document.
type conformance struct {
	t     *testing.T
	paths []conformancePath
	defs  map[string]map[string]any
}

type conformancePath struct {
	re  *regexp.Regexp
	ops map[string]map[string]any // method (lower case) → operation
}

func newConformance(t *testing.T, raw []byte) *conformance {
	var doc struct {
		Paths       map[string]map[string]json.RawMessage
		Definitions map[string]map[string]any
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	c := &conformance{t: t, defs: doc.Definitions}
	templates := make([]string, 0, len(doc.Paths))
	for p := range doc.Paths {
		templates = append(templates, p)
	}
	// Literal paths before templated ones: /tasks/download before /tasks/{id}.
	sort.Slice(templates, func(i, j int) bool {
		return strings.Count(templates[i], "{") < strings.Count(templates[j], "{")
	})
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, p := range templates {
		// Paths hold letters, digits, '/', '-', '_', '.' and parameters.
		cp := conformancePath{re: regexp.MustCompile("^" + param.ReplaceAllString(strings.ReplaceAll(p, ".", `\.`), `[^/]+`) + "$"),
			ops: map[string]map[string]any{}}
		for method, op := range doc.Paths[p] {
			var m map[string]any
			if json.Unmarshal(op, &m) == nil {
				cp.ops[method] = m
			}
		}
		c.paths = append(c.paths, cp)
	}
	return c
}

// check returns what is wrong with an answer: no operation, an undeclared
// status, or a body its schema refuses.
func (c *conformance) check(method, path string, status int, body []byte) []string {
	path, _, _ = strings.Cut(path, "?")
	var op map[string]any
	for _, p := range c.paths {
		if p.re.MatchString(path) {
			if o, ok := p.ops[strings.ToLower(method)]; ok {
				op = o
				break
			}
		}
	}
	if op == nil {
		return []string{"no operation in the document"}
	}
	responses, _ := op["responses"].(map[string]any)
	resp, ok := responses[fmt.Sprint(status)].(map[string]any)
	if !ok {
		if resp, ok = responses["default"].(map[string]any); !ok {
			return []string{fmt.Sprintf("status %d is not among the operation's responses", status)}
		}
	}
	schema, _ := resp["schema"].(map[string]any)
	if schema == nil || len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	var out []string
	c.value("$", schema, v, &out)
	return out
}

// resolved follows a schema's $ref.
func (c *conformance) resolved(s map[string]any) map[string]any {
	for i := 0; i < 16; i++ {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		s = c.defs[strings.TrimPrefix(ref, "#/definitions/")]
	}
	return s
}

// properties gathers an object schema's properties, its allOf members'
// included.
func (c *conformance) properties(s map[string]any) (map[string]any, bool) {
	s = c.resolved(s)
	props := map[string]any{}
	declared := false
	if p, ok := s["properties"].(map[string]any); ok {
		declared = true
		for k, v := range p {
			props[k] = v
		}
	}
	all, _ := s["allOf"].([]any)
	for _, m := range all {
		if ms, ok := m.(map[string]any); ok {
			if p, ok := c.properties(ms); ok {
				declared = true
				for k, v := range p {
					props[k] = v
				}
			}
		}
	}
	return props, declared
}

func (c *conformance) value(at string, s map[string]any, v any, out *[]string) {
	if v == nil {
		if s["x-nullable"] != true && c.resolved(s)["x-nullable"] != true {
			*out = append(*out, at+": null where the document does not allow it")
		}
		return
	}
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 && s["properties"] == nil {
		c.value(at, all[0].(map[string]any), v, out)
		return
	}
	r := c.resolved(s)
	typ, _ := r["type"].(string)
	props, declared := c.properties(r)
	if typ == "" && declared {
		typ = "object"
	}
	switch typ {
	case "string":
		if _, ok := v.(string); !ok {
			*out = append(*out, fmt.Sprintf("%s: %v where the document says a string (format %v)", at, v, r["format"]))
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %v where the document says a number", at, v))
		} else if _, err := n.Int64(); typ == "integer" && err != nil {
			*out = append(*out, fmt.Sprintf("%s: %v where the document says an integer", at, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			*out = append(*out, fmt.Sprintf("%s: %v where the document says a boolean", at, v))
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %T where the document says an array", at, v))
			return
		}
		items, _ := r["items"].(map[string]any)
		for i, e := range list {
			if items != nil {
				c.value(fmt.Sprintf("%s[%d]", at, i), items, e, out)
			}
		}
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %T where the document says an object", at, v))
			return
		}
		extra, _ := r["additionalProperties"].(map[string]any)
		for k, e := range obj {
			if p, ok := props[k].(map[string]any); ok {
				c.value(at+"."+k, p, e, out)
			} else if extra != nil {
				c.value(at+"."+k, extra, e, out)
			} else if declared {
				*out = append(*out, fmt.Sprintf("%s.%s: a field the document does not declare", at, k))
			}
		}
	}
}

// sseFrames reads a stream that ends (its subject has ended) and returns
// the data of each frame.
func (w *world) sseFrames(key, path string) [][]byte {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", w.s.HTTPURL+path, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || err != nil {
		w.t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
	}
	var frames [][]byte
	for _, line := range strings.Split(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			frames = append(frames, []byte(data))
		}
	}
	if len(frames) == 0 {
		w.t.Fatalf("GET %s: no frames in %q", path, body)
	}
	return frames
}

// wsMessages reads a WebSocket stream until the server closes it after
// the final frame.
func (w *world) wsMessages(key, path string) [][]byte {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.s.HTTPURL, "http")+path,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.CloseNow()
	var out [][]byte
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			if len(out) == 0 {
				w.t.Fatalf("%s: %v before any message", path, err)
			}
			return out
		}
		out = append(out, msg)
	}
}
