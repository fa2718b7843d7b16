package rest

import (
	"encoding/json"
	"testing"

	openapi "github.com/taskmesh/taskmesh/gen/openapi"
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
