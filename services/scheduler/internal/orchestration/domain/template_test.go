package domain

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// A PyTorch training template, with a bool.
func trainTemplate() Template {
	return Template{ID: "train-pytorch", Name: "PyTorch 训练任务", Description: "使用 PyTorch 进行模型训练",
		Command: "python", Args: []string{"train.py", "--model", "{{model}}", "--epochs", "{{epochs}}", "--amp={{ amp }}"},
		Workdir: "/workspace", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "{{gpu_id}}"}, Timeout: 86400, Priority: 5,
		Variables: []Var{
			{Name: "model", Type: VarSelect, Required: true, Options: []string{"resnet50", "vgg16", "bert"}},
			{Name: "epochs", Type: VarInt, Default: "100"},
			{Name: "gpu_id", Type: VarString, Default: "0"},
			{Name: "amp", Type: VarBool, Default: "false"},
		}}
}

func created(t *testing.T, def Template) Template {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	recs, err := NewTemplate(now, "tenant-a", "user-1", def)
	if err != nil {
		t.Fatal(err)
	}
	tpl, ok := ApplyTemplate(Template{}, recs[0])
	if !ok || tpl.TenantID != "tenant-a" || tpl.CreatedBy != "user-1" || !tpl.CreatedAt.Equal(now) || tpl.Version != 1 {
		t.Fatalf("created %+v", tpl)
	}
	return tpl
}

func TestTemplateRendersEachVariableType(t *testing.T) {
	tpl := created(t, trainTemplate())
	in, err := tpl.Render(map[string]any{"model": "bert", "epochs": float64(3), "amp": true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"train.py", "--model", "bert", "--epochs", "3", "--amp=true"}
	if !slices.Equal(in.Args, want) || in.Env["CUDA_VISIBLE_DEVICES"] != "0" || in.Command != "python" ||
		in.Type != task.TypeShell || *in.Timeout != 86400 || *in.Priority != 5 || in.Name != "PyTorch 训练任务" {
		t.Fatalf("rendered %+v", in)
	}
	// Values from the command line arrive as strings.
	in, err = tpl.Render(map[string]any{"model": "vgg16", "epochs": "12", "amp": "false", "gpu_id": "2,3"})
	if err != nil || in.Args[4] != "12" || in.Env["CUDA_VISIBLE_DEVICES"] != "2,3" {
		t.Fatalf("rendered %+v, %v", in, err)
	}
	if _, err := task.NormalizeSpec(in); err != nil {
		t.Fatalf("a rendered template is a valid task: %v", err)
	}
}

// A value is text inside the one argument that holds its placeholder:
// spaces, quotes and shell syntax are not interpreted, nothing is split.
func TestTemplateValueStaysOneArgument(t *testing.T) {
	tpl := created(t, Template{ID: "echo", Name: "echo", Command: "printf", Args: []string{"<%s>", "{{msg}}"},
		Variables: []Var{{Name: "msg", Type: VarString, Required: true}}})
	hostile := `"; rm -rf / #`
	in, err := tpl.Render(map[string]any{"msg": hostile})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.Args, []string{"<%s>", hostile}) || in.Type != task.TypeShell {
		t.Fatalf("args = %q (type %s)", in.Args, in.Type)
	}
	// A value that looks like a placeholder is not expanded again.
	in, _ = tpl.Render(map[string]any{"msg": "{{msg}}"})
	if in.Args[1] != "{{msg}}" {
		t.Fatalf("args = %q", in.Args)
	}
}

// A template whose command is a command line (no args) is split into its
// words before the values go in: a value stays inside the word that holds
// its placeholder. A line with shell syntax is refused when the template
// is defined.
func TestTemplateCommandLineSplitsBeforeValues(t *testing.T) {
	tpl := created(t, Template{ID: "line", Name: "line", Command: `printf '<%s>' "{{msg}}" --tag={{tag}}`,
		Variables: []Var{{Name: "msg", Type: VarString, Required: true}, {Name: "tag", Type: VarString, Default: "a"}}})
	hostile := `x y; rm -rf / #`
	in, err := tpl.Render(map[string]any{"msg": hostile, "tag": "b c"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Command != "printf" || !slices.Equal(in.Args, []string{"<%s>", hostile, "--tag=b c"}) {
		t.Fatalf("rendered %q %q", in.Command, in.Args)
	}
	if s, err := task.NormalizeSpec(in); err != nil || !slices.Equal(s.Args, in.Args) {
		t.Fatalf("normalized %q, %v", s.Args, err)
	}
	_, err = NewTemplate(time.Now(), "tenant-a", "user-1", Template{ID: "pipe", Name: "pipe", Command: "echo {{x}} | wc -l",
		Variables: []Var{{Name: "x", Type: VarString}}})
	var inv *task.InvalidError
	if !errors.As(err, &inv) || inv.Field != "command" || !strings.Contains(err.Error(), "shell syntax") {
		t.Fatalf("a template with a pipe: %v", err)
	}
}

func TestTemplateRenderRefusesBadVariables(t *testing.T) {
	tpl := created(t, trainTemplate())
	tests := []struct {
		name   string
		values map[string]any
		field  string
		text   string
	}{
		{"unknown variable", map[string]any{"model": "bert", "lr": "0.1"}, "variables.lr", `no variable "lr"`},
		{"missing required", map[string]any{"epochs": "3"}, "variables.model", "model is required"},
		{"int given text", map[string]any{"model": "bert", "epochs": "many"}, "variables.epochs", "integer"},
		{"int given a fraction", map[string]any{"model": "bert", "epochs": 1.5}, "variables.epochs", "integer"},
		{"int given a boolean", map[string]any{"model": "bert", "epochs": true}, "variables.epochs", "integer"},
		{"bool given text", map[string]any{"model": "bert", "amp": "yes"}, "variables.amp", "true or false"},
		{"bool given a number", map[string]any{"model": "bert", "amp": float64(1)}, "variables.amp", "true or false"},
		{"select outside options", map[string]any{"model": "gpt"}, "variables.model", "resnet50, vgg16, bert"},
		{"select given a number", map[string]any{"model": float64(1)}, "variables.model", "one of"},
		{"string given a number", map[string]any{"model": "bert", "gpu_id": float64(1)}, "variables.gpu_id", "must be a string"},
		{"NUL in a value", map[string]any{"model": "bert", "gpu_id": "a\x00b"}, "variables.gpu_id", "NUL"},
		// Every JSON kind is named as JSON names it, never by a Go type.
		{"string given an object", map[string]any{"model": "bert", "gpu_id": map[string]any{"x": float64(1)}}, "variables.gpu_id",
			"variable gpu_id must be a string, not an object"},
		{"string given an array", map[string]any{"model": "bert", "gpu_id": []any{"0"}}, "variables.gpu_id",
			"variable gpu_id must be a string, not an array"},
		// null is a value left out: the default, or required.
		{"required given null", map[string]any{"model": nil}, "variables.model", "variable model is required"},
		{"string given a boolean", map[string]any{"model": "bert", "gpu_id": false}, "variables.gpu_id",
			"variable gpu_id must be a string, not a boolean"},
		{"int given an object", map[string]any{"model": "bert", "epochs": map[string]any{}}, "variables.epochs",
			"variable epochs must be an integer, not an object"},
		{"int given an array", map[string]any{"model": "bert", "epochs": []any{}}, "variables.epochs",
			"variable epochs must be an integer, not an array"},
		{"bool given an array", map[string]any{"model": "bert", "amp": []any{true}}, "variables.amp",
			"variable amp must be true or false, not an array"},
		{"select given an object", map[string]any{"model": map[string]any{"name": "bert"}}, "variables.model",
			"variable model must be one of resnet50, vgg16, bert, not an object"},
		{"string given a Go number", map[string]any{"model": "bert", "gpu_id": 3}, "variables.gpu_id",
			"variable gpu_id must be a string, not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tpl.Render(tt.values)
			var ie *task.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.field || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want field %s mentioning %q", err, tt.field, tt.text)
			}
		})
	}
	// A template stored before a variable was removed (by an update that
	// the current rules would refuse) still names the variable.
	stale := tpl
	stale.Variables = stale.Variables[1:]
	_, err := stale.Render(map[string]any{})
	if err == nil || !strings.Contains(err.Error(), "{{model}}") {
		t.Fatalf("stale template: %v", err)
	}
}

func TestTemplateDefinitionIsChecked(t *testing.T) {
	base := trainTemplate()
	tests := []struct {
		name  string
		edit  func(*Template)
		field string
		text  string
	}{
		{"placeholder without variable", func(t *Template) { t.Args = append(t.Args, "{{lr}}") }, "args[6]", `{{lr}} names no declared variable "lr"`},
		{"placeholder in env", func(t *Template) { t.Env["X"] = "{{ nope }}" }, "env.X", "nope"},
		{"bad id", func(t *Template) { t.ID = "a/b" }, "id", `"a/b"`},
		{"no name", func(t *Template) { t.Name = " " }, "name", "required"},
		{"no command", func(t *Template) { t.Command = "" }, "command", "required"},
		{"unknown type", func(t *Template) { t.Variables[1].Type = "float" }, "variables[1].type", `"float"`},
		{"duplicate variable", func(t *Template) { t.Variables[2].Name = "epochs" }, "variables[2].name", "twice"},
		{"bad variable name", func(t *Template) { t.Variables[2].Name = "gpu-id" }, "variables[2].name", `"gpu-id"`},
		{"select without options", func(t *Template) { t.Variables[0].Options = nil }, "variables[0].options", "needs its options"},
		{"options on a string", func(t *Template) { t.Variables[2].Options = []string{"0"} }, "variables[2].options", "only for a select"},
		{"bad int default", func(t *Template) { t.Variables[1].Default = "ten" }, "variables[1].default", "integer"},
		{"select default outside", func(t *Template) { t.Variables[0].Default = "gpt" }, "variables[0].default", "one of"},
		{"priority out of range", func(t *Template) { t.Priority = 11 }, "priority", "1 (highest) to 10"},
		{"bad env key", func(t *Template) { t.Env["1X"] = "v" }, "env", `"1X"`},
		{"relative workdir", func(t *Template) { t.Workdir = "runs/{{gpu_id}}" }, "workdir", "absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := base
			def.Args = slices.Clone(base.Args)
			def.Variables = slices.Clone(base.Variables)
			def.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "{{gpu_id}}"}
			tt.edit(&def)
			_, err := NewTemplate(time.Now(), "tenant-a", "user-1", def)
			var ie *task.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.field || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want field %s mentioning %q", err, tt.field, tt.text)
			}
		})
	}
}

// A workdir may be a variable's value: the definition passes, and the
// value must then be an absolute path, checked with the task it makes.
func TestTemplateWorkdirFromAVariable(t *testing.T) {
	def := trainTemplate()
	def.Workdir = "{{dir}}"
	def.Variables = append(slices.Clone(def.Variables), Var{Name: "dir", Type: VarString, Default: "/workspace"})
	tpl := created(t, def)
	for dir, ok := range map[string]bool{"/data/run-1": true, "relative/dir": false, "../../..": false} {
		in, err := tpl.Render(map[string]any{"model": "bert", "dir": dir})
		if err != nil {
			t.Fatal(err)
		}
		_, err = task.NormalizeSpec(in)
		var ie *task.InvalidError
		if ok && err != nil || !ok && (!errors.As(err, &ie) || ie.Field != "workdir") {
			t.Errorf("workdir %q: %v", dir, err)
		}
	}
}

func TestTemplateUpdateAndDelete(t *testing.T) {
	tpl := created(t, trainTemplate())
	later := tpl.CreatedAt.Add(time.Hour)
	def := trainTemplate()
	def.ID, def.Description = "", "updated"
	recs, err := tpl.Update(later, "user-2", def, nil)
	if err != nil {
		t.Fatal(err)
	}
	up, _ := ApplyTemplate(tpl, recs[0])
	if up.Description != "updated" || up.ID != "train-pytorch" || up.CreatedBy != "user-1" || !up.CreatedAt.Equal(tpl.CreatedAt) ||
		!up.UpdatedAt.Equal(later) || up.Version != 2 || up.TenantID != "tenant-a" {
		t.Fatalf("updated %+v", up)
	}
	def.ID = "other"
	if _, err := tpl.Update(later, "user-2", def, nil); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("update with another id: %v", err)
	}
	recs, err = up.Delete(later, "user-2")
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := ApplyTemplate(up, recs[0])
	if !gone.Deleted {
		t.Fatal("not deleted")
	}
	if _, err := gone.Update(later, "u", trainTemplate(), nil); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("update of a deleted template: %v", err)
	}
	if _, err := gone.Delete(later, "u"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("delete of a deleted template: %v", err)
	}
}

// updated applies the records of an update to tpl.
func updated(t *testing.T, tpl Template, def Template, fields ...string) Template {
	t.Helper()
	recs, err := tpl.Update(tpl.CreatedAt.Add(time.Hour), "user-2", def, fields)
	if err != nil {
		t.Fatalf("update of %v: %v", fields, err)
	}
	up, ok := ApplyTemplate(tpl, recs[0])
	if !ok || len(recs) != 1 {
		t.Fatalf("update of %v recorded %v", fields, recs)
	}
	return up
}

// An update naming fields changes those, empty values included, and keeps
// every other one; the definition that results is checked as a new one.
func TestTemplateUpdateChangesTheFieldsNamed(t *testing.T) {
	tpl := created(t, trainTemplate())
	up := updated(t, tpl, Template{Description: "updated"}, "id", "description")
	if up.Description != "updated" || up.Name != tpl.Name || up.Command != tpl.Command || !slices.Equal(up.Args, tpl.Args) ||
		!slices.EqualFunc(up.Variables, tpl.Variables, varsEqual) || up.Workdir != tpl.Workdir || up.Env["CUDA_VISIBLE_DEVICES"] != "{{gpu_id}}" ||
		up.Timeout != 86400 || up.Priority != 5 || up.ID != tpl.ID || up.CreatedBy != "user-1" || up.Version != 2 {
		t.Fatalf("updated %+v", up)
	}

	// A list or map named takes the value given: variables and args are
	// replaced whole, and an empty one clears.
	vars := []Var{{Name: "model", Type: VarString, Default: "resnet50"}}
	up = updated(t, tpl, Template{Args: []string{"train.py", "{{model}}"}, Variables: vars}, "args", "variables", "env", "tags")
	if !slices.Equal(up.Args, []string{"train.py", "{{model}}"}) || !slices.EqualFunc(up.Variables, vars, varsEqual) ||
		len(up.Env) != 0 || len(up.Tags) != 0 || up.Description != tpl.Description || up.Workdir != tpl.Workdir {
		t.Fatalf("updated %+v", up)
	}

	// Refused: each error names its field, and nothing is recorded.
	relative := Template{Workdir: "relative/dir"}
	for _, tt := range []struct {
		name   string
		def    Template
		fields []string
		field  string
	}{
		{"an empty name named", Template{}, []string{"name"}, "name"},
		{"an empty command named", Template{Name: "x"}, []string{"name", "command"}, "command"},
		{"another id", Template{ID: "other", Description: "x"}, []string{"id", "description"}, "id"},
		{"a relative workdir", relative, []string{"workdir"}, "workdir"},
		{"a variable still used dropped", Template{Variables: vars}, []string{"variables"}, "args[4]"},
		{"a path of no field", Template{}, []string{"description", "checkpoint.enabled"}, "update_mask"},
		{"no path: the whole definition, without a name", Template{Description: "x"}, nil, "name"},
	} {
		recs, err := tpl.Update(tpl.CreatedAt.Add(time.Hour), "user-2", tt.def, tt.fields)
		var ie *task.InvalidError
		if !errors.As(err, &ie) || ie.Field != tt.field || recs != nil {
			t.Errorf("%s: %v, %v; want invalid %s", tt.name, recs, err, tt.field)
		}
	}

	// The template's own fields may be named, and stay.
	up = updated(t, tpl, Template{ID: tpl.ID, CreatedBy: "mallory", CreatedAt: time.Unix(0, 0)}, "id", "created_by", "created_at")
	if up.ID != tpl.ID || up.CreatedBy != "user-1" || !up.CreatedAt.Equal(tpl.CreatedAt) {
		t.Fatalf("updated %+v", up)
	}
}

// An update that changes nothing is still an update, as a task's is: it is
// recorded, and the template after is the one before.
func TestTemplateUpdateOfNothing(t *testing.T) {
	tpl := created(t, trainTemplate())
	up := updated(t, tpl, Template{}, "id")
	if !reflect.DeepEqual(definition(up), definition(tpl)) || up.Version != tpl.Version+1 {
		t.Fatalf("after an update of nothing: %+v, before %+v", up, tpl)
	}
}

// Naming one field changes that field alone, for every field an update
// may name: none is left out of the merge.
func TestTemplateUpdateNamesEachFieldAlone(t *testing.T) {
	tpl := created(t, trainTemplate())
	other := Template{Name: "other", Description: "other", Command: "python3", Args: []string{"train.py", "{{model}}"},
		Workdir: "/other", Env: map[string]string{"K": "v"}, Timeout: 60, Priority: 1,
		Variables: []Var{{Name: "model", Type: VarString}, {Name: "epochs", Type: VarInt}, {Name: "gpu_id", Type: VarString},
			{Name: "amp", Type: VarBool}, {Name: "more", Type: VarString}},
		Category: "other", Tags: []string{"other"}, Checkpoint: true, Artifacts: []string{"out/*"}}
	for _, f := range TemplateFields {
		up := updated(t, tpl, other, f)
		before, after := definition(tpl), definition(up)
		var changed []string
		for k := range after {
			if !reflect.DeepEqual(before[k], after[k]) {
				changed = append(changed, k)
			}
		}
		// The mask names a field as the template's JSON does, but for
		// checkpoint; the template's own fields stay.
		want := []string{f}
		switch f {
		case "id", "created_by", "created_at":
			want = nil
		case "checkpoint":
			want = []string{"checkpoint_enabled"}
		}
		if !slices.Equal(changed, want) {
			t.Errorf("naming %s changed %v", f, changed)
		}
	}
}

// definition is t as JSON keys, without what every write changes.
func definition(t Template) map[string]any {
	raw, _ := json.Marshal(t)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	delete(m, "version")
	delete(m, "updated_at")
	return m
}

func varsEqual(a, b Var) bool { return reflect.DeepEqual(a, b) }

// A template's checkpoint and artifacts pass on to its tasks; bad globs
// are refused when the template is stored.
func TestTemplateCarriesCheckpointAndArtifacts(t *testing.T) {
	def := trainTemplate()
	def.Checkpoint, def.Artifacts = true, []string{"out/*.pt"}
	tpl := created(t, def)
	in, err := tpl.Render(map[string]any{"model": "bert"})
	if err != nil || in.Checkpoint == nil || !*in.Checkpoint || !slices.Equal(in.Artifacts, []string{"out/*.pt"}) {
		t.Fatalf("rendered %+v, %v", in, err)
	}
	def.Artifacts = []string{"../escape/*"}
	_, err = NewTemplate(time.Now(), "tenant-a", "user-1", def)
	var ie *task.InvalidError
	if !errors.As(err, &ie) || ie.Field != "artifacts" {
		t.Fatalf("bad glob: %v", err)
	}
}

// A template given no timeout or priority shows the defaults its tasks
// get; given ones are kept.
func TestTemplateShowsTheTaskDefaults(t *testing.T) {
	tpl := created(t, Template{ID: "mini", Name: "mini", Command: "true"})
	if tpl.Timeout != task.DefaultTimeout || tpl.Priority != task.DefaultPriority {
		t.Errorf("timeout, priority = %d, %d; want %d, %d", tpl.Timeout, tpl.Priority, task.DefaultTimeout, task.DefaultPriority)
	}
	in, err := tpl.Render(nil)
	if err != nil || *in.Timeout != task.DefaultTimeout || *in.Priority != task.DefaultPriority {
		t.Errorf("rendered %+v, %v", in, err)
	}
	tpl = created(t, Template{ID: "set", Name: "set", Command: "true", Timeout: 60, Priority: 2})
	if tpl.Timeout != 60 || tpl.Priority != 2 {
		t.Errorf("given timeout, priority = %d, %d", tpl.Timeout, tpl.Priority)
	}
}
