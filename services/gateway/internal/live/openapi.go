package live

import "strings"

// OpenAPIPaths documents the two routes Register adds under prefix, for
// the gateway's OpenAPI 2.0 document (the generator only knows the proto
// routes). tag groups them with the API's other operations; frameRef is
// the definition of a frame's data (e.g. "#/definitions/liveTaskFrame").
// The gateway adds the error responses, as for every operation.
func OpenAPIPaths(prefix, tag, frameRef string) map[string]any {
	param := strings.TrimSuffix(prefix[strings.LastIndex(prefix, "{")+1:], "}")
	params := []any{
		map[string]any{"name": param, "in": "path", "required": true, "type": "string"},
		map[string]any{"name": "after_version", "in": "query", "required": false, "type": "string", "format": "int64",
			"description": "Resume after this task version (the id of the last frame received); frames up to it are not sent."},
	}
	frame := map[string]any{"$ref": frameRef}
	// A WebSocket message wraps the frame with the SSE frame's id and
	// event fields.
	message := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"id":    map[string]any{"type": "integer", "format": "int64", "description": "The SSE frame's id: the version after the change."},
			"event": map[string]any{"type": "string", "description": "The SSE frame's event name."},
			"data":  frame,
		},
	}
	return map[string]any{
		prefix + "/events": map[string]any{"get": map[string]any{
			"operationId": tag + "_StreamEvents",
			"tags":        []any{tag},
			"summary":     "Live task progress as Server-Sent Events",
			"description": "A text/event-stream of the task's changes. Each frame is `id: <task version>`, " +
				"`event: status|progress|deleted` and `data: <frame JSON>`; `: keep-alive` comments are sent while " +
				"nothing happens. The first frame is the task's current state unless the client already has it " +
				"(Last-Event-ID header or after_version). The stream ends after the final frame (completed, failed, " +
				"cancelled or deleted; `final` is true in it). A reconnect with the final frame's id answers 204. " +
				"A stream ended early (idle timeout, slow consumer, gateway shutdown) sends " +
				"`event: close` with data {\"reason\": …} first; reconnect with Last-Event-ID to resume.",
			// Refusals (unknown task, no credentials) are answered as
			// JSON error bodies before any stream starts.
			"produces": []any{"text/event-stream", "application/json"},
			"parameters": append(params, map[string]any{"name": "Last-Event-ID", "in": "header", "required": false,
				"type": "string", "format": "int64", "description": "Resume after this task version (sent by EventSource on reconnect)."}),
			"responses": map[string]any{
				"200": map[string]any{"description": "The event stream; each data line is one frame.", "schema": frame},
				"204": map[string]any{"description": "The client already has the task's final state."},
			},
		}},
		prefix + "/ws": map[string]any{"get": map[string]any{
			"operationId": tag + "_StreamWebSocket",
			"tags":        []any{tag},
			"summary":     "Live task progress over a WebSocket",
			"description": "A WebSocket (send Connection: Upgrade, Upgrade: websocket) carrying the SSE frames as text " +
				"messages {\"id\": <task version>, \"event\": \"status|progress|deleted\", \"data\": <frame>}. The " +
				"server pings; the client sends nothing. Close codes: 1000 after the final frame (do not reconnect), " +
				"1001 idle timeout or shutdown and 1008 slow consumer (reconnect with after_version = last id), " +
				"1011 internal error.",
			"parameters": params,
			"responses": map[string]any{
				"101": map[string]any{"description": "Switching to the WebSocket protocol; each text message is one frame, wrapped.", "schema": message},
			},
		}},
	}
}

// TaskFrameSchema is the OpenAPI definition of TaskFrame.
func TaskFrameSchema() map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	ts := func(desc string) map[string]any {
		return map[string]any{"type": "string", "format": "date-time", "x-nullable": true, "description": desc}
	}
	i32 := func(desc string) map[string]any {
		return map[string]any{"type": "integer", "format": "int32", "description": desc}
	}
	return map[string]any{
		"type":        "object",
		"description": "One frame of a live task stream: the task's live fields as of version.",
		"properties": map[string]any{
			"task_id":           str("Task id."),
			"version":           map[string]any{"type": "integer", "format": "int64", "description": "Task version after the change; the frame id."},
			"change":            str("The event that made the change (submitted, leased, started, progressed, succeeded, failed, retry_scheduled, lease_expired, preempted, suspended, requeued, canceled, deleted, expired, …) or \"snapshot\" for the task's state read from the scheduler."),
			"status":            str("pending, assigned, running, completed, failed, cancelled, preempted or suspended."),
			"progress":          i32("0–100."),
			"progress_message":  str("Last progress message."),
			"attempt_id":        str("Current attempt."),
			"assigned_agent_id": str("Agent of the current attempt."),
			"retry_count":       i32("Retries so far."),
			"max_retries":       i32("Retries allowed."),
			"exit_code":         map[string]any{"type": "integer", "format": "int32", "x-nullable": true},
			"error":             str("Error of a failed or cancelled task."),
			"created_at":        ts("Submission time."),
			"assigned_at":       ts("Lease time of the current attempt."),
			"started_at":        ts("Start of the current attempt."),
			"ended_at":          ts("End of the task."),
			"updated_at":        ts("Time of the change."),
			"deleted":           map[string]any{"type": "boolean", "description": "The task was deleted or expired."},
			"final":             map[string]any{"type": "boolean", "description": "Last frame of the stream."},
		},
	}
}

// VideoFrameSchema is the OpenAPI schema of VideoView's frame data.
func VideoFrameSchema() map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	return map[string]any{
		"type":        "object",
		"description": "One frame of a live video generation stream.",
		"properties": map[string]any{
			"task_id":      str("Task id."),
			"taskId":       str("Task id (the API's other spelling)."),
			"task_status":  str("QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELED or UNKNOWN."),
			"taskStatus":   str("task_status (the API's other spelling)."),
			"taskProgress": map[string]any{"type": "integer", "format": "int32", "description": "0–100."},
			"code":         str("Why the generation failed, as a video API code such as InvalidParameter or InternalError (FAILED only)."),
			"message":      str("Why the generation failed (FAILED only)."),
			"video_url":    str("Link to the MP4, valid 24 hours (SUCCEEDED only)."),
			"version":      map[string]any{"type": "integer", "format": "int64", "description": "Task version after the change; the frame id."},
			"final":        map[string]any{"type": "boolean", "description": "Last frame of the stream."},
		},
	}
}
