package kubernetes

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const crdFile = "../../../../../deployments/kubernetes/50-mfs-crds.yaml"

// schemaCheck validates v against the subset of OpenAPI v3 the CRDs use
// (type, required, properties, items, minimum, enum,
// x-kubernetes-preserve-unknown-fields), the way the API server prunes and
// validates: unknown fields are refused unless preserved.
func schemaCheck(path string, s map[string]any, v any) error {
	if s["x-kubernetes-preserve-unknown-fields"] == true {
		return nil
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: not an object", path)
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range asList(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("%s: %s is required", path, r)
			}
		}
		for k, x := range m {
			p, ok := props[k].(map[string]any)
			if !ok {
				return fmt.Errorf("%s: unknown field %s", path, k)
			}
			if err := schemaCheck(path+"."+k, p, x); err != nil {
				return err
			}
		}
	case "array":
		items, _ := s["items"].(map[string]any)
		for i, x := range asList(v) {
			if err := schemaCheck(fmt.Sprintf("%s[%d]", path, i), items, x); err != nil {
				return err
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: not a string", path)
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) {
			return fmt.Errorf("%s: not an integer", path)
		}
		if min, ok := s["minimum"].(float64); ok && n < min {
			return fmt.Errorf("%s: below %v", path, min)
		}
	}
	return nil
}

func asList(v any) []any { l, _ := v.([]any); return l }

// crdSchemas reads the manifest: one apiextensions.k8s.io/v1 CRD per
// resource, returning each one's openAPIV3Schema by plural.
func crdSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var crd map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &crd); err != nil {
			t.Fatal(err)
		}
		if crd["apiVersion"] != "apiextensions.k8s.io/v1" || crd["kind"] != "CustomResourceDefinition" {
			t.Fatalf("not a v1 CRD: %v %v", crd["apiVersion"], crd["kind"])
		}
		spec := crd["spec"].(map[string]any)
		names := spec["names"].(map[string]any)
		plural := names["plural"].(string)
		if md := crd["metadata"].(map[string]any); md["name"] != plural+"."+spec["group"].(string) {
			t.Fatalf("CRD name %v does not match %s.%s", md["name"], plural, spec["group"])
		}
		v := asList(spec["versions"])[0].(map[string]any)
		if v["name"] != "v1" || v["storage"] != true {
			t.Fatalf("version = %v", v)
		}
		out[plural] = v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
		if spec["group"] != WorkGroups.Group {
			t.Fatalf("group %v", spec["group"])
		}
	}
	return out
}

func nested(depth int) map[string]any {
	n := map[string]any{"id": fmt.Sprintf("q-%d", depth), "name": fmt.Sprintf("l%d", depth), "min": 0, "max": 1}
	if depth < 12 {
		n["children"] = []any{nested(depth + 1)}
	}
	return n
}

// The manifest defines both resources, the objects the operator writes
// are valid against it, and quota trees nest at any depth.
func TestCRDsAcceptWhatTheOperatorWrites(t *testing.T) {
	schemas := crdSchemas(t)
	for _, plural := range []string{RayClusters.Resource, WorkGroups.Resource} {
		if schemas[plural] == nil {
			t.Fatalf("no CRD for %s", plural)
		}
	}
	load := func(name string) map[string]any {
		raw, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var o map[string]any
		if err := yaml.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		return map[string]any{"spec": o["spec"]}
	}
	if err := schemaCheck("", schemas["mfsrayclusters"], load("mfsraycluster.yaml")); err != nil {
		t.Errorf("MFSRayCluster: %v", err)
	}
	wg := load("mfsworkgroup.yaml")
	if err := schemaCheck("", schemas["mfsworkgroups"], wg); err != nil {
		t.Errorf("MFSWorkGroup: %v", err)
	}
	raw, _ := yaml.Marshal(map[string]any{"spec": map[string]any{"tenantId": "t", "cluster": "c", "rayCluster": "r",
		"machineType": "A100", "gpus": 1, "quota": nested(2)}})
	var deep map[string]any
	_ = yaml.Unmarshal(raw, &deep)
	if err := schemaCheck("", schemas["mfsworkgroups"], deep); err != nil {
		t.Errorf("a quota nested 11 levels deep: %v", err)
	}
	// The schema still refuses what is wrong.
	spec := wg["spec"].(map[string]any)
	delete(spec, "quota")
	if err := schemaCheck("", schemas["mfsworkgroups"], wg); err == nil {
		t.Error("a WorkGroup without its quota was accepted")
	}
}
