package rest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// pipelineEnvelopeSchema documents the pipeline API's error body and its
// codes.
func pipelineEnvelopeSchema() map[string]any {
	var enum []any
	var lines []string
	for _, c := range httperr.PipelineCodes {
		if !slices.Contains(enum, any(c.Code)) {
			enum = append(enum, c.Code)
		}
		lines = append(lines, fmt.Sprintf("%s (HTTP %d): %s", c.Code, c.HTTPStatus, c.Meaning))
	}
	return map[string]any{
		"type":     "object",
		"required": []any{"code", "message"},
		"properties": map[string]any{
			"code":    map[string]any{"type": "string", "enum": enum, "description": "Error code:\n" + strings.Join(lines, "\n")},
			"message": map[string]any{"type": "string"},
		},
		"example": map[string]any{"code": httperr.PipelineJobNotFound, "message": "job not found"},
	}
}

// pipelineErrorResponses returns the pipeline operations' error statuses
// with their codes; 404 is JOB_NOT_FOUND.
func pipelineErrorResponses() map[int]string {
	byStatus := map[int][]string{}
	for _, c := range httperr.PipelineCodes {
		if c.Code == httperr.PipelineNotFound || c.HTTPStatus == 405 {
			continue // about routes, not operations
		}
		byStatus[c.HTTPStatus] = append(byStatus[c.HTTPStatus], c.Code+": "+c.Meaning)
	}
	out := map[int]string{}
	for s, codes := range byStatus {
		out[s] = strings.Join(codes, "; ")
	}
	return out
}

// pipelineExtra documents the pipeline's hand-written routes: the
// multipart upload and, with live streams, the job's SSE stream.
func pipelineExtra(withLive bool) Extra {
	paths := map[string]any{
		uploadRoute: map[string]any{"post": map[string]any{
			"operationId": "PipelineService_UploadJobInputForm",
			"tags":        []any{"PipelineService"},
			"summary":     "Upload an input file of a job",
			"description": "multipart/form-data with a `kind` field (model, quant or ref_image) and then one `file` part, " +
				"streamed into the object store. A model must be an ONNX model, a quant archive a zip, a reference image " +
				"a JPEG, PNG, BMP or WEBP (judged by content). Above the kind's size limit: 413 RequestTooLarge, nothing kept. " +
				"The key is usable by the uploading tenant only.",
			"consumes": []any{"multipart/form-data"},
			"parameters": []any{
				map[string]any{"name": "kind", "in": "formData", "required": true, "type": "string", "enum": []any{"model", "quant", "ref_image"}},
				map[string]any{"name": "file", "in": "formData", "required": true, "type": "file"},
			},
			"responses": map[string]any{"200": map[string]any{"description": "The stored upload.", "schema": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"key":  map[string]any{"type": "string", "description": "Pass it to POST /jobs as model_key, quant_key or in ref_image_keys."},
					"kind": map[string]any{"type": "string"},
					"size": map[string]any{"type": "integer", "format": "int64"},
				},
			}}},
		}},
	}
	if withLive {
		paths[liveJobRoutes+"/events"] = map[string]any{"get": map[string]any{
			"operationId": "PipelineService_StreamJobEvents",
			"tags":        []any{"PipelineService"},
			"summary":     "Live job progress as Server-Sent Events",
			"description": "A text/event-stream of the job's changes: `id: <job version>`, `event: status|progress`, " +
				"`data: <the job as GET /jobs/{job_id} shows it, plus \"final\">`. The first frame is the job now unless " +
				"the client has it (Last-Event-ID or after_version); the stream ends after the COMPLETED or FAILED frame " +
				"(a reconnect past it answers 204). Clients fall back to polling GET /jobs/{job_id} every 3–5 s when it drops.",
			"produces": []any{"text/event-stream", "application/json"},
			"parameters": []any{
				map[string]any{"name": "job_id", "in": "path", "required": true, "type": "string"},
				map[string]any{"name": "after_version", "in": "query", "required": false, "type": "string", "format": "int64"},
				map[string]any{"name": "Last-Event-ID", "in": "header", "required": false, "type": "string", "format": "int64"},
			},
			"responses": map[string]any{
				"200": map[string]any{"description": "The event stream; each data line is the job, with final.", "schema": map[string]any{"$ref": "#/definitions/liveJobFrame"}},
				"204": map[string]any{"description": "The client already has the job's final state."},
			},
		}}
	}
	if !withLive {
		return Extra{Paths: paths}
	}
	return Extra{Paths: paths, Definitions: map[string]any{"liveJobFrame": map[string]any{
		"type":        "object",
		"description": "One frame of a live job stream: the job as GET /jobs/{job_id} shows it, plus final.",
		"allOf":       []any{map[string]any{"$ref": "#/definitions/v1Job"}},
		"properties": map[string]any{
			"final": map[string]any{"type": "boolean", "description": "Last frame of the stream: the job is COMPLETED or FAILED."},
		},
	}}}
}
