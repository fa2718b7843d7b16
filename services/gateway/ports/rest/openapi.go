package rest

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/taskmesh/taskmesh/services/gateway/internal/access"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// Extra documents what the main generated document lacks: hand-written
// routes (Paths, Definitions), or a separately generated video document
// (Video), whose operations answer the video API's error body.
type Extra struct {
	Paths, Definitions map[string]any
	Video              []byte
}

// Document returns the generated OpenAPI 2.0 document completed with what
// the generator cannot know: the bearer security scheme and the error
// envelope with every code, as responses of every operation, and the extras:
// hand-written routes, and video documents (generated apart: their keys are
// JSON names), merged in with the video API's error body and codes on their
// operations. It runs once, at start-up.
func Document(generated []byte, extras ...Extra) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(generated, &doc); err != nil {
		return nil, err
	}
	// The merged document takes the title of whichever proto came last.
	doc["info"] = map[string]any{
		"title":   "Taskmesh API",
		"version": "v1",
		"description": "Errors are answered as {\"code\": int, \"message\": string, \"data\": null}; " +
			"see the ErrorEnvelope definition for every code. Each answer carries X-Request-Id.",
	}
	doc["securityDefinitions"] = map[string]any{
		"bearer": map[string]any{
			"type": "apiKey",
			"in":   "header",
			"name": "Authorization",
			"description": "\"Bearer <secret>\": a tenant API key (tm_…) for /api/v1/… routes, " +
				"an agent token (tma_…) for /api/v1/agent/… routes. The other kind is refused with 403.",
		},
	}
	doc["security"] = []any{map[string]any{"bearer": []any{}}}

	defs, _ := doc["definitions"].(map[string]any)
	if defs == nil {
		defs = map[string]any{}
		doc["definitions"] = defs
	}
	if _, err := markNullable(defs, false); err != nil {
		return nil, err
	}
	defs["ErrorEnvelope"] = envelopeSchema()

	paths, _ := doc["paths"].(map[string]any)
	if paths == nil {
		paths = map[string]any{}
		doc["paths"] = paths
	}
	for _, x := range extras {
		maps.Copy(paths, x.Paths)
		maps.Copy(defs, x.Definitions)
	}
	documentCSV(paths)
	for path, item := range paths {
		ops, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("path %s is not an object", path)
		}
		for _, op := range ops {
			op, ok := op.(map[string]any)
			if !ok {
				continue // e.g. a path-level "parameters" list
			}
			responses, _ := op["responses"].(map[string]any)
			if responses == nil {
				responses = map[string]any{}
				op["responses"] = responses
			}
			// Hand-written video routes answer the video API's error body,
			// the pipeline's routes the pipeline's.
			errs, ref := errorResponses(strings.HasPrefix(path, access.AgentRoutePrefix)), "#/definitions/ErrorEnvelope"
			switch {
			case httperr.IsVideoPath(path):
				errs, ref = videoErrorResponses(), "#/definitions/VideoErrorEnvelope"
				defs["VideoErrorEnvelope"] = videoEnvelopeSchema()
			case httperr.IsPipelinePath(path):
				errs, ref = pipelineErrorResponses(), "#/definitions/PipelineErrorEnvelope"
				defs["PipelineErrorEnvelope"] = pipelineEnvelopeSchema()
			}
			for status, desc := range errs {
				responses[strconv.Itoa(status)] = map[string]any{
					"description": desc,
					"schema":      map[string]any{"$ref": ref},
				}
			}
		}
	}
	for _, x := range extras {
		if x.Video == nil {
			continue
		}
		defs["VideoErrorEnvelope"] = videoEnvelopeSchema()
		if err := mergeVideo(doc, defs, x.Video); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// mergeVideo adds a video document's paths and definitions to doc, each
// operation answering the video error body.
func mergeVideo(doc, defs map[string]any, raw []byte) error {
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("video document: %w", err)
	}
	vdefs, _ := v["definitions"].(map[string]any)
	// Generated with JSON names: its keys are the fields' JSON names.
	if _, err := markNullable(vdefs, true); err != nil {
		return fmt.Errorf("video document: %w", err)
	}
	for name, d := range vdefs {
		// A message both APIs use (taskmesh.task.v1.Webhook) is the same
		// definition in both documents; only a different one clashes.
		if have, dup := defs[name]; dup && !reflect.DeepEqual(have, d) {
			return fmt.Errorf("video document: definition %s already exists", name)
		}
		defs[name] = d
	}
	paths, _ := doc["paths"].(map[string]any)
	if paths == nil {
		paths = map[string]any{}
		doc["paths"] = paths
	}
	vpaths, _ := v["paths"].(map[string]any)
	for path, item := range vpaths {
		if _, dup := paths[path]; dup {
			return fmt.Errorf("video document: path %s already exists", path)
		}
		ops, ok := item.(map[string]any)
		if !ok {
			return fmt.Errorf("video document: path %s is not an object", path)
		}
		for _, op := range ops {
			op, ok := op.(map[string]any)
			if !ok {
				continue
			}
			responses, _ := op["responses"].(map[string]any)
			if responses == nil {
				responses = map[string]any{}
				op["responses"] = responses
			}
			for status, desc := range videoErrorResponses() {
				responses[strconv.Itoa(status)] = map[string]any{
					"description": desc,
					"schema":      map[string]any{"$ref": "#/definitions/VideoErrorEnvelope"},
				}
			}
		}
		paths[path] = ops
	}
	return nil
}

// videoEnvelopeSchema documents the video API's error body and its codes.
func videoEnvelopeSchema() map[string]any {
	var enum []any
	var lines []string
	for _, c := range httperr.VideoCodes {
		if !slices.Contains(enum, any(c.Code)) {
			enum = append(enum, c.Code)
		}
		lines = append(lines, fmt.Sprintf("%s (HTTP %d): %s", c.Code, c.HTTPStatus, c.Meaning))
	}
	return map[string]any{
		"type":     "object",
		"required": []any{"code", "message", "request_id"},
		"properties": map[string]any{
			"code":       map[string]any{"type": "string", "enum": enum, "description": "Error code:\n" + strings.Join(lines, "\n")},
			"message":    map[string]any{"type": "string"},
			"request_id": map[string]any{"type": "string", "description": "The request's id, also the X-Request-Id header."},
		},
		"example": map[string]any{"code": httperr.VideoInvalidAPIKey, "message": "Invalid API-key provided.", "request_id": "fb53c4ec-1c12-4fc4-a580-6d6ac0f1a8b2"},
	}
}

// videoErrorResponses returns the video operations' error statuses with
// their codes.
func videoErrorResponses() map[int]string {
	byStatus := map[int][]string{}
	for _, c := range httperr.VideoCodes {
		if c.HTTPStatus == 404 || c.HTTPStatus == 405 {
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

// envelopeSchema documents the envelope and lists every code.
func envelopeSchema() map[string]any {
	var enum []any
	var lines []string
	for _, c := range httperr.Codes {
		enum = append(enum, c.Code)
		lines = append(lines, fmt.Sprintf("%d (HTTP %d): %s", c.Code, c.HTTPStatus, c.Meaning))
	}
	return map[string]any{
		"type":     "object",
		"required": []any{"code", "message", "data"},
		"properties": map[string]any{
			"code": map[string]any{
				"type":        "integer",
				"format":      "int32",
				"enum":        enum,
				"description": "Business code, separate from the HTTP status:\n" + strings.Join(lines, "\n"),
			},
			"message": map[string]any{"type": "string"},
			"data":    map[string]any{"type": "object", "x-nullable": true, "description": "Always null."},
		},
		"example": map[string]any{"code": httperr.CodeAttemptMismatch, "message": "attempt mismatch", "data": nil},
	}
}

// errorResponses returns the error statuses of an operation with the codes
// each can carry. 410 (lease expired) only concerns the agent routes.
func errorResponses(agentRoute bool) map[int]string {
	byStatus := map[int][]string{}
	for _, c := range httperr.Codes {
		switch {
		case c.Code == httperr.CodeMethodNotAllowed:
			continue // an operation is a path and its method
		case c.Code == httperr.CodeLeaseExpired && !agentRoute:
			continue
		}
		byStatus[c.HTTPStatus] = append(byStatus[c.HTTPStatus], fmt.Sprintf("%d %s", c.Code, c.Meaning))
	}
	byStatus[503] = []string{fmt.Sprintf("%d service unavailable", httperr.CodeInternal)}
	out := map[int]string{}
	for _, s := range slices.Sorted(maps.Keys(byStatus)) {
		out[s] = strings.Join(byStatus[s], "; ")
	}
	return out
}
