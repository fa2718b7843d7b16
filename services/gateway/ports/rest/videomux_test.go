package rest

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	openapi "github.com/taskmesh/taskmesh/gen/openapi"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
)

func TestVideoMarshalerWritesTheDocumentedKeys(t *testing.T) {
	m := videoMarshaler
	resp := &videov1.GetVideoGenerationResponse{Success: true, Code: 200, RequestId: "r", RequestIdCamel: "r",
		Data: &videov1.VideoGenerationTask{TaskId: "t", TaskIdCamel: "t", TaskStatus: "RUNNING", TaskStatusCamel: "RUNNING", GmtCreate: new("2026-01-02 03:04:05"),
			TaskInput: &videov1.VideoGenerationTaskInput{Prompt: "p", Resolution: "720", Duration: 5, VideoCount: 1}}}
	b, err := m.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	data := got["data"].(map[string]any)
	in := data["taskInput"].(map[string]any)
	if _, ok := in["actual_prompt"]; ok {
		t.Errorf("actual_prompt present without prompt_extend: %s", b)
	}
	if v, ok := in["video_url"]; !ok || v != nil {
		t.Errorf("video_url = %v (present %v), want null", v, ok)
	}
	for _, k := range []string{"requestId", "request_id", "success", "failed", "code"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s in %s", k, b)
		}
	}
	for _, k := range []string{"taskId", "task_id", "taskStatus", "task_status", "completed_time", "scheduled_time", "gmtCreate"} {
		if _, ok := data[k]; !ok {
			t.Errorf("no data.%s in %s", k, b)
		}
	}

	// With prompt_extend the rewritten prompt is shown.
	resp.Data.TaskInput.ActualPrompt = new("rewritten")
	resp.Data.TaskInput.VideoUrl = wrapperspb.String("http://v")
	b, _ = m.Marshal(resp)
	if !strings.Contains(string(b), `"actual_prompt":"rewritten"`) || !strings.Contains(string(b), `"video_url":"http://v"`) {
		t.Errorf("with prompt_extend: %s", b)
	}
	// Optional fields left unset are absent; unset messages are null.
	b, _ = m.Marshal(&videov1.GetVideoGenerationResponse{Data: &videov1.VideoGenerationTask{TaskId: "t", TaskStatus: "UNKNOWN"}})
	if strings.Contains(string(b), `"code":null`) || strings.Contains(string(b), `"gmtCreate"`) || !strings.Contains(string(b), `"completed_time":null`) {
		t.Errorf("unknown task: %s", b)
	}
	// Other messages use the same names.
	b, _ = m.Marshal(&videov1.CreateVideoGenerationResponse{RequestId: "r", Output: &videov1.VideoGenerationOutput{TaskStatus: "QUEUED", TaskId: "t"}})
	var created map[string]any
	_ = json.Unmarshal(b, &created)
	if out := created["output"].(map[string]any); out["task_status"] != "QUEUED" || out["task_id"] != "t" || created["request_id"] != "r" {
		t.Errorf("create answer: %s", b)
	}
}

func TestDocumentMergesTheVideoAPI(t *testing.T) {
	out, err := Document(openapi.JSON, Extra{Video: openapi.VideoJSON})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	paths := doc["paths"].(map[string]any)
	post, ok := paths["/v1/video/generations"].(map[string]any)["post"].(map[string]any)
	if !ok {
		t.Fatal("no POST /v1/video/generations")
	}
	resp409 := post["responses"].(map[string]any)["409"].(map[string]any)
	if !strings.Contains(resp409["description"].(string), "UnsupportedOperation.TaskRunning") ||
		resp409["schema"].(map[string]any)["$ref"] != "#/definitions/VideoErrorEnvelope" {
		t.Errorf("409 = %v", resp409)
	}
	// Query and delete answer under both prefixes, with and without tasks/.
	for _, prefix := range []string{"/v1/video/generations/", "/api/v1/video/generations/"} {
		for _, path := range []string{prefix + "{task_id}", prefix + "tasks/{task_id}"} {
			for _, method := range []string{"get", "delete"} {
				if _, ok := paths[path].(map[string]any)[method]; !ok {
					t.Errorf("no %s %s", strings.ToUpper(method), path)
				}
			}
		}
	}
	defs := doc["definitions"].(map[string]any)
	env := defs["VideoErrorEnvelope"].(map[string]any)
	enum := env["properties"].(map[string]any)["code"].(map[string]any)["enum"].([]any)
	if len(enum) < 9 {
		t.Errorf("video codes = %v", enum)
	}
	if _, ok := defs["v1GetVideoGenerationResponse"]; !ok {
		t.Error("video definitions not merged")
	}
	// A video document that collides with the task API's is refused.
	if _, err := Document(openapi.JSON, Extra{Video: openapi.JSON}); err == nil {
		t.Error("merging overlapping documents succeeded")
	}
}
