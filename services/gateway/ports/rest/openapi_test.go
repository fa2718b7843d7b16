package rest

import (
	"encoding/json"
	"slices"
	"testing"

	openapi "github.com/taskmesh/taskmesh/gen/openapi"
	"github.com/taskmesh/taskmesh/services/gateway/internal/live"
)

func TestDocumentKeepsGeneratedContent(t *testing.T) {
	out, err := Document(openapi.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var gen, doc map[string]any
	if err := json.Unmarshal(openapi.JSON, &gen); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	genPaths, docPaths := gen["paths"].(map[string]any), doc["paths"].(map[string]any)
	if len(genPaths) == 0 || len(genPaths) != len(docPaths) {
		t.Errorf("paths: generated %d, served %d", len(genPaths), len(docPaths))
	}
	genDefs, docDefs := gen["definitions"].(map[string]any), doc["definitions"].(map[string]any)
	for name := range genDefs {
		if _, ok := docDefs[name]; !ok {
			t.Errorf("definition %s lost", name)
		}
	}
	if _, ok := docDefs["ErrorEnvelope"]; !ok {
		t.Error("no ErrorEnvelope definition")
	}
	if info := doc["info"].(map[string]any); info["title"] != "Taskmesh API" {
		t.Errorf("info = %v", info)
	}
}

func TestDocumentRejectsInvalidInput(t *testing.T) {
	if _, err := Document([]byte("{")); err == nil {
		t.Error("Document accepted invalid JSON")
	}
	if _, err := Document([]byte(`{"paths":{"/x":"not an object"}}`)); err == nil {
		t.Error("Document accepted a malformed path item")
	}
}

func TestDocumentMergesHandWrittenRoutes(t *testing.T) {
	out, err := Document(openapi.JSON, Extra{
		Paths:       map[string]any{"/api/v1/x/{id}/stream": map[string]any{"get": map[string]any{"operationId": "X"}}},
		Definitions: map[string]any{"xFrame": map[string]any{"type": "object"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths       map[string]map[string]map[string]any
		Definitions map[string]any
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	op := doc.Paths["/api/v1/x/{id}/stream"]["get"]
	responses, _ := op["responses"].(map[string]any)
	if op["operationId"] != "X" || responses["404"] == nil || doc.Definitions["xFrame"] == nil {
		t.Errorf("hand-written route = %v, definitions %v", op, doc.Definitions["xFrame"])
	}
}

// Every generated definition is matched to its message, so no field with
// presence escapes x-nullable.
func TestEveryDefinitionIsMatchedToItsMessage(t *testing.T) {
	for _, doc := range []struct {
		name      string
		raw       []byte
		jsonNames bool
	}{{"taskmesh", openapi.JSON, false}, {"video", openapi.VideoJSON, true}} {
		var d struct{ Definitions map[string]any }
		if err := json.Unmarshal(doc.raw, &d); err != nil {
			t.Fatal(err)
		}
		unmatched, err := markNullable(d.Definitions, doc.jsonNames)
		if err != nil {
			t.Fatalf("%s: %v", doc.name, err)
		}
		if len(unmatched) > 0 {
			t.Errorf("%s: definitions matched to no message: %v", doc.name, unmatched)
		}
	}
}

// Unset fields with presence are answered as null (a task not yet
// started: "started_at": null, "exit_code": null), and the document says
// so; plain scalars, lists and maps are never null.
func TestFieldsWithPresenceAreNullable(t *testing.T) {
	out, err := Document(openapi.JSON, Extra{Video: openapi.VideoJSON})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Definitions map[string]map[string]any }
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	prop := func(def, name string) map[string]any {
		p, _ := doc.Definitions[def]["properties"].(map[string]any)[name].(map[string]any)
		if p == nil {
			t.Fatalf("%s has no property %s", def, name)
		}
		return p
	}
	for _, c := range []struct {
		def, prop string
		nullable  bool
	}{
		{"v1Task", "started_at", true},   // google.protobuf.Timestamp
		{"v1Task", "exit_code", true},    // optional int32
		{"v1Task", "error", true},        // optional string
		{"v1Task", "video", true},        // a message
		{"v1Task", "priority", false},    // int32
		{"v1Task", "name", false},        // string
		{"v1Task", "args", false},        // repeated
		{"v1Task", "env", false},         // map
		{"v1JobOutput", "bie_key", true}, // google.protobuf.StringValue
		{"v1VideoGenerationTask", "scheduled_time", true},
		{"v1VideoGenerationTask", "taskInput", true},
		{"v1VideoGenerationTask", "taskId", false},
	} {
		p := prop(c.def, c.prop)
		if got := p["x-nullable"] == true; got != c.nullable {
			t.Errorf("%s.%s: x-nullable %v, want %v (%v)", c.def, c.prop, got, c.nullable, p)
		}
	}
	// A nullable reference keeps its type through allOf.
	video := prop("v1Task", "video")
	if all, _ := video["allOf"].([]any); len(all) != 1 || all[0].(map[string]any)["$ref"] != "#/definitions/v1VideoParams" || video["$ref"] != nil {
		t.Errorf("v1Task.video = %v", video)
	}
}

// The streams refuse (unknown id, no credentials) with a JSON error body
// before any stream starts, and the usage report answers CSV on request:
// each operation lists what it may answer.
func TestOperationsListWhatTheyProduce(t *testing.T) {
	out, err := Document(openapi.JSON, pipelineExtra(true), Extra{
		Paths:       live.OpenAPIPaths(liveTaskRoutes, "TaskService", "#/definitions/liveTaskFrame"),
		Definitions: map[string]any{"liveTaskFrame": live.TaskFrameSchema()},
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Produces []string
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{
		liveTaskRoutes + "/events": {"text/event-stream", "application/json"},
		liveJobRoutes + "/events":  {"text/event-stream", "application/json"},
		usageRoute:                 {"application/json", "text/csv"},
	} {
		if got := doc.Paths[path]["get"].Produces; !slices.Equal(got, want) {
			t.Errorf("GET %s produces %v, want %v", path, got, want)
		}
	}
}

// Each shape of handler (live routes or not, live group routes or not)
// gets one document per process, built on first use, and only the live
// shapes document the live stream routes.
func TestHandlersOfOneShapeShareTheirDocument(t *testing.T) {
	paths := func(doc []byte) map[string]json.RawMessage {
		var d struct {
			Paths map[string]json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		return d.Paths
	}
	for _, c := range []struct {
		shape              [2]bool
		taskEvents, groups bool
	}{
		{[2]bool{false, false}, false, false},
		{[2]bool{true, false}, true, false},
		{[2]bool{true, true}, true, true},
	} {
		first, err := apiDocuments[c.shape]()
		if err != nil {
			t.Fatal(err)
		}
		again, err := apiDocuments[c.shape]()
		if err != nil {
			t.Fatal(err)
		}
		if &first.doc[0] != &again.doc[0] || &first.routes[0] != &again.routes[0] {
			t.Errorf("shape %v: the document was built twice", c.shape)
		}
		p := paths(first.doc)
		if _, ok := p[liveTaskRoutes+"/events"]; ok != c.taskEvents {
			t.Errorf("shape %v documents %s/events: %v, want %v", c.shape, liveTaskRoutes, ok, c.taskEvents)
		}
		if _, ok := p[liveGroupRoutes+"/events"]; ok != c.groups {
			t.Errorf("shape %v documents %s/events: %v, want %v", c.shape, liveGroupRoutes, ok, c.groups)
		}
		if len(first.routes) != len(p) {
			t.Errorf("shape %v: %d routes indexed from %d paths", c.shape, len(first.routes), len(p))
		}
	}
}
