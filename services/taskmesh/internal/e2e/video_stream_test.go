package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// videoSSEFrame is one frame of a finished SSE answer.
type videoSSEFrame struct {
	id, event string
	data      map[string]any
}

// videoSSE reads the video stream of id to its end (a stream of a final
// generation ends after one frame); header, when set, is sent too.
func (w *videoWorld) videoSSE(key, id string, header http.Header) (int, []videoSSEFrame, map[string]any) {
	w.t.Helper()
	code, frames, body, _ := w.videoSSERaw(key, id, header)
	return code, frames, body
}

// videoSSERaw is videoSSE that also returns the stream as sent.
func (w *videoWorld) videoSSERaw(key, id string, header http.Header) (int, []videoSSEFrame, map[string]any, string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", w.s.HTTPURL+"/v1/video/generations/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatalf("reading the stream of %s: %v (so far %q)", id, err, raw)
	}
	if resp.StatusCode != 200 {
		body := map[string]any{}
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, nil, body, string(raw)
	}
	var frames []videoSSEFrame
	for _, block := range strings.Split(strings.TrimSpace(string(raw)), "\n\n") {
		var f videoSSEFrame
		for _, line := range strings.Split(block, "\n") {
			switch k, v, _ := strings.Cut(line, ": "); k {
			case "id":
				f.id = v
			case "event":
				f.event = v
			case "data":
				if err := json.Unmarshal([]byte(v), &f.data); err != nil {
					w.t.Fatalf("frame data %q: %v", v, err)
				}
			}
		}
		if f.data != nil {
			frames = append(frames, f)
		}
	}
	return resp.StatusCode, frames, nil, string(raw)
}

// The live streams of the video API show what its GET answer shows
// (docs/api/video.md#live-streams): UNKNOWN for what GET calls UNKNOWN,
// AccessDenied for another tenant's generation, a FAILED frame's code and
// message split as GET splits them, and the SUCCEEDED frame with the link
// to the video.
func TestVideoStreamsAnswerAsTheGETDoes(t *testing.T) {
	t.Parallel()
	w := newVideoWorld(t)

	t.Run("an unknown id is one final UNKNOWN frame", func(t *testing.T) {
		w := w.in(t)
		code, frames, body := w.videoSSE(w.premium, "no-such-generation", nil)
		if code != 200 || len(frames) != 1 {
			t.Fatalf("stream = %d %v %v", code, frames, body)
		}
		f := frames[0]
		if f.id != "0" || f.event != "status" || f.data["task_status"] != "UNKNOWN" || f.data["taskStatus"] != "UNKNOWN" ||
			f.data["task_id"] != "no-such-generation" || f.data["taskId"] != "no-such-generation" || f.data["final"] != true {
			t.Errorf("frame = %+v", f)
		}
		// EventSource reconnects with the last id: 204 tells it to stop.
		if code, frames, _ := w.videoSSE(w.premium, "no-such-generation", http.Header{"Last-Event-ID": {"0"}}); code != 204 || len(frames) != 0 {
			t.Errorf("resumed stream = %d %v", code, frames)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.s.HTTPURL, "http")+"/v1/video/generations/no-such-generation/ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + w.premium}}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		_, raw, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("no WebSocket frame: %v", err)
		}
		var m struct {
			ID    int64          `json:"id"`
			Event string         `json:"event"`
			Data  map[string]any `json:"data"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.ID != 0 || m.Event != "status" || m.Data["task_status"] != "UNKNOWN" || m.Data["final"] != true {
			t.Errorf("WebSocket frame = %s (%v)", raw, err)
		}
		if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Errorf("after the UNKNOWN frame: %v, want a normal close", err)
		}
	})

	t.Run("a task of the task API is UNKNOWN, as its GET says", func(t *testing.T) {
		w := w.in(t)
		plain := w.submit(w.premium, map[string]any{"name": "x", "command": "true"})
		code, frames, body := w.videoSSE(w.premium, plain, nil)
		if code != 200 || len(frames) != 1 || frames[0].data["task_status"] != "UNKNOWN" || frames[0].data["final"] != true {
			t.Fatalf("stream of a shell task = %d %v %v", code, frames, body)
		}
	})

	t.Run("another tenant's generation is AccessDenied", func(t *testing.T) {
		w := w.in(t)
		id := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "mine"}})
		code, _, body := w.videoSSE(w.other, id, nil)
		if code != 403 || body["code"] != "AccessDenied" || body["request_id"] == "" {
			t.Errorf("another tenant's stream = %d %v", code, body)
		}
	})

	t.Run("a FAILED frame carries code and message as GET shows them", func(t *testing.T) {
		w := w.in(t)
		id := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "failing"}})
		att := w.claim(id)
		w.agentCall(id+"/start", map[string]any{"attempt_id": att})
		w.agentCall(id+"/complete", map[string]any{"attempt_id": att, "exit_code": 1, "error": "InvalidParameter: The size is not match"})
		code, frames, body := w.videoSSE(w.premium, id, nil)
		if code != 200 || len(frames) != 1 {
			t.Fatalf("stream = %d %v %v", code, frames, body)
		}
		if d := frames[0].data; d["task_status"] != "FAILED" || d["code"] != "InvalidParameter" || d["message"] != "The size is not match" || d["final"] != true {
			t.Errorf("FAILED frame = %v", d)
		}
	})

	t.Run("the SUCCEEDED frame links to the video", func(t *testing.T) {
		w := w.in(t)
		id := w.post(w.premium, map[string]any{"model": "wan2.2-t2v", "input": map[string]any{"prompt": "succeeding"}})
		att := w.claim(id)
		w.agentCall(id+"/start", map[string]any{"attempt_id": att})
		mp4 := append([]byte("\x00\x00\x00\x18ftypmp42"), bytes.Repeat([]byte{9}, 500)...)
		up := w.agentCall(id+"/result/upload", map[string]any{"attempt_id": att, "size_bytes": len(mp4)})
		req, _ := http.NewRequest("PUT", up["upload_url"].(string), bytes.NewReader(mp4))
		for k, v := range up["headers"].(map[string]any) {
			req.Header.Set(k, v.(string))
		}
		req.ContentLength = int64(len(mp4))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("upload: %v %v", resp, err)
		}
		w.agentCall(id+"/complete", map[string]any{"attempt_id": att, "exit_code": 0,
			"result_object": map[string]any{"key": up["object_key"], "size_bytes": len(mp4)}})
		code, frames, body, raw := w.videoSSERaw(w.premium, id, nil)
		if code != 200 || len(frames) != 1 {
			t.Fatalf("stream = %d %v %v", code, frames, body)
		}
		d := frames[0].data
		url, _ := d["video_url"].(string)
		if d["task_status"] != "SUCCEEDED" || d["taskProgress"] != 100.0 || d["final"] != true || url == "" {
			t.Fatalf("SUCCEEDED frame = %v", d)
		}
		// The link reads as in the GET answer: its query's & not escaped
		// as \u0026.
		if !strings.Contains(url, "&") || !strings.Contains(raw, `"video_url":"`+url+`"`) {
			t.Errorf("the link as sent: %s", raw)
		}
		// The WebSocket's frame carries the same link, as plain.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.s.HTTPURL, "http")+"/v1/video/generations/"+id+"/ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + w.premium}}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		if _, msg, err := conn.Read(ctx); err != nil || !strings.Contains(string(msg), `"video_url":"`+url+`"`) {
			t.Errorf("WebSocket frame = %s (%v)", msg, err)
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, mp4) {
			t.Errorf("the frame's video_url = %d, %d bytes", resp.StatusCode, len(got))
		}
	})
}
