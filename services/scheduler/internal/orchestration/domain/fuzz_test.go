package domain

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzTemplateVariables feeds arbitrary variable values (the JSON object a
// template run takes) to a template's rendering: nothing panics, and a
// rendering accepted keeps every argument one argument, holds no NUL and
// leaves no placeholder of the template itself unfilled.
func FuzzTemplateVariables(f *testing.F) {
	for _, s := range []string{
		`{"model":"bert","epochs":3,"amp":true}`, `{"model":"vgg16","epochs":"12","amp":"false","gpu_id":"2,3"}`,
		`{"model":"gpt"}`, `{"model":"bert","epochs":1.5}`, `{"model":"bert","epochs":"1e3"}`, `{"model":"bert","gpu_id":"{{model}}"}`,
		`{"model":"bert","gpu_id":"a b; rm -rf /"}`, `{"model":"bert","nope":1}`, `{"model":"bert","amp":"yes"}`, `{"model":null}`,
		`{"model":"bert","gpu_id":"\u0000"}`, `{"model":"bert","epochs":9223372036854775808}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	tpl := trainTemplate()
	if _, err := NewTemplate(time.Now(), "t", "u", tpl); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var values map[string]any
		if json.Unmarshal(raw, &values) != nil {
			return
		}
		in, err := tpl.Render(values)
		if err != nil {
			return
		}
		if len(in.Args) != len(tpl.Args) {
			t.Fatalf("rendering %s made %d arguments of %d: %q", raw, len(in.Args), len(tpl.Args), in.Args)
		}
		for _, s := range append(append([]string{in.Command, in.Workdir}, in.Args...), in.Env["CUDA_VISIBLE_DEVICES"]) {
			if strings.ContainsRune(s, 0) {
				t.Fatalf("rendering %s holds NUL: %q", raw, s)
			}
		}
		// The template's own placeholders are all filled (a value may
		// itself read like one: it is inserted as text, once).
		for i, a := range tpl.Args {
			if strings.Contains(a, "{{") && in.Args[i] == a {
				t.Fatalf("argument %q left unfilled by %s", a, raw)
			}
		}
	})
}

// FuzzTemplateDefinition feeds arbitrary template definitions to the
// check a create runs: nothing panics, and a definition accepted renders
// with its defaults, or refuses naming a variable.
func FuzzTemplateDefinition(f *testing.F) {
	good, _ := json.Marshal(trainTemplate())
	for _, s := range []string{string(good),
		`{"name":"n","command":"echo","args":["{{x}}"],"variables":[{"name":"x","type":"string","default":"hi"}]}`,
		`{"name":"n","command":"{{a}}","variables":[{"name":"a","type":"select","options":[]}]}`,
		`{"name":"n","command":"c","args":["{{undeclared}}"]}`, `{"name":"","command":""}`,
		`{"name":"n","command":"c","variables":[{"name":"v","type":"int","default":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var def Template
		if json.Unmarshal(raw, &def) != nil {
			return
		}
		recs, err := NewTemplate(now, "tenant-a", "user-1", def)
		if err != nil {
			return
		}
		tpl, ok := ApplyTemplate(Template{}, recs[0])
		if !ok {
			t.Fatalf("an accepted template does not apply: %+v", recs[0])
		}
		if _, err := tpl.Render(nil); err != nil && !strings.Contains(err.Error(), "variable") {
			t.Fatalf("rendering an accepted template with its defaults: %v", err)
		}
	})
}
