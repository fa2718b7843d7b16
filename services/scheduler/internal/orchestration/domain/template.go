package domain

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskmesh/taskmesh/platform/domain/cmdline"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Template is a tenant's task template (docs/api/templates.md: TaskTemplate),
// with the bookkeeping of its aggregate.
type Template struct {
	ID          string            `json:"id"`
	TenantID    string            `json:"tenant_id"`
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Command     string            `json:"command"`
	Args        []string          `json:"args,omitempty"`
	Workdir     string            `json:"workdir,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Timeout     int               `json:"timeout,omitempty"`
	Priority    int               `json:"priority,omitempty"`
	Variables   []Var             `json:"variables,omitempty"`
	Category    string            `json:"category,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	// Checkpoint and Artifacts pass on to the tasks run from the template.
	Checkpoint bool      `json:"checkpoint_enabled,omitempty"`
	Artifacts  []string  `json:"artifacts,omitempty"`
	CreatedBy  string    `json:"created_by,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	Version    int64     `json:"version"`
	Deleted    bool      `json:"deleted,omitempty"`
}

// Var is one variable of a template (TemplateVar).
type Var struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"` // string, int, bool, select
	Required    bool     `json:"required,omitempty"`
	Default     string   `json:"default,omitempty"`
	Description string   `json:"description,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// Variable types.
const (
	VarString = "string"
	VarInt    = "int"
	VarBool   = "bool"
	VarSelect = "select"
)

// Template events.
type (
	// TemplateCreated: the template exists; Template is all of it.
	TemplateCreated struct{ Template Template }
	// TemplateUpdated: the template's definition changed; Template carries
	// the new definition (its id, tenant and creation stay).
	TemplateUpdated struct{ Template Template }
	// TemplateDeleted: the template is gone.
	TemplateDeleted struct{}
)

func (TemplateCreated) EventName() string { return "TemplateCreated" }
func (TemplateUpdated) EventName() string { return "TemplateUpdated" }
func (TemplateDeleted) EventName() string { return "TemplateDeleted" }

// TemplateAggregateID is the event-store aggregate of a tenant's template:
// template ids are chosen per tenant, so two tenants may use the same one.
func TemplateAggregateID(tenant, id string) string { return "template/" + tenant + "/" + id }

// ApplyTemplate folds one template event: the one fold of template
// events. It reports false for an event it has no case for.
func ApplyTemplate(t Template, r Record) (Template, bool) {
	version := t.Version + 1
	switch e := r.Event.(type) {
	case TemplateCreated:
		t = e.Template
		t.CreatedAt = r.At
		t.Deleted = false
	case TemplateUpdated:
		keep := t
		t = e.Template
		t.ID, t.TenantID, t.CreatedBy, t.CreatedAt = keep.ID, keep.TenantID, keep.CreatedBy, keep.CreatedAt
	case TemplateDeleted:
		t.Deleted = true
	default:
		return t, false
	}
	t.Version, t.UpdatedAt = version, r.At
	return t, true
}

// Limits of a template.
const (
	MaxVariables  = 64
	MaxTags       = 32
	MaxOptions    = 256
	maxDescribing = 4096
)

var (
	// templateID is ident without "/": a template id is a path segment of
	// its routes.
	templateID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	varName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// placeholder is {{name}}, spaces inside the braces allowed.
	placeholder = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)
)

// NewTemplate records a template. def holds the definition as submitted
// (ID, Name, …, Variables, Category, Tags); its id must already be set.
func NewTemplate(now time.Time, tenant, actor string, def Template) ([]Record, error) {
	t, err := checkTemplate(def)
	if err != nil {
		return nil, err
	}
	t.TenantID, t.CreatedBy = tenant, actor
	return []Record{{Event: TemplateCreated{Template: t}, At: now, Actor: actor}}, nil
}

// TemplateFields are a template's fields by their names in an update's
// field mask, the TaskTemplate names of docs/api/templates.md#tasktemplate.
// id, created_by and created_at are the template's own: an update may
// name them, and they stay.
var TemplateFields = []string{"id", "name", "description", "command", "args", "workdir", "env", "timeout",
	"priority", "variables", "category", "tags", "checkpoint", "artifacts", "created_by", "created_at"}

// Update changes the template's definition by def
// (docs/api/templates.md#updating-a-template): each field fields names
// takes def's value, empty included, and the others keep the template's;
// no fields at all replace the whole definition with def. A name outside
// TemplateFields is ErrInvalid naming update_mask. The id, creator and
// creation time stay, and the definition that results is checked as a
// new template's is. Changing nothing is still an update, recorded as
// any other.
func (t Template) Update(now time.Time, actor string, def Template, fields []string) ([]Record, error) {
	if t.Deleted {
		return nil, task.ErrNotFound
	}
	if def.ID != "" && def.ID != t.ID {
		return nil, invalid("id", "is %q in the path and %q in the body", t.ID, def.ID)
	}
	def, err := t.changedBy(def, fields)
	if err != nil {
		return nil, err
	}
	def.ID = t.ID
	next, err := checkTemplate(def)
	if err != nil {
		return nil, err
	}
	next.TenantID, next.CreatedBy, next.CreatedAt = t.TenantID, t.CreatedBy, t.CreatedAt
	return []Record{{Event: TemplateUpdated{Template: next}, At: now, Actor: actor}}, nil
}

// changedBy is t's definition with the fields named taken from def, or def
// when none are.
func (t Template) changedBy(def Template, fields []string) (Template, error) {
	if len(fields) == 0 {
		return def, nil
	}
	for _, f := range fields {
		if !slices.Contains(TemplateFields, f) {
			return t, invalid("update_mask", "%q is not a field of a template (one of %s)", f, strings.Join(TemplateFields, ", "))
		}
	}
	out := t
	for _, f := range fields {
		switch f {
		case "name":
			out.Name = def.Name
		case "description":
			out.Description = def.Description
		case "command":
			out.Command = def.Command
		case "args":
			out.Args = def.Args
		case "workdir":
			out.Workdir = def.Workdir
		case "env":
			out.Env = def.Env
		case "timeout":
			out.Timeout = def.Timeout
		case "priority":
			out.Priority = def.Priority
		case "variables":
			out.Variables = def.Variables
		case "category":
			out.Category = def.Category
		case "tags":
			out.Tags = def.Tags
		case "checkpoint":
			out.Checkpoint = def.Checkpoint
		case "artifacts":
			out.Artifacts = def.Artifacts
		}
	}
	return out, nil
}

// Delete removes the template.
func (t Template) Delete(now time.Time, actor string) ([]Record, error) {
	if t.Deleted {
		return nil, task.ErrNotFound
	}
	return []Record{{Event: TemplateDeleted{}, At: now, Actor: actor}}, nil
}

// checkTemplate validates a definition and returns it with only its
// definition fields.
func checkTemplate(d Template) (Template, error) {
	t := Template{ID: d.ID, Name: strings.TrimSpace(d.Name), Description: d.Description, Command: d.Command,
		Args: d.Args, Workdir: d.Workdir, Env: d.Env, Timeout: d.Timeout, Priority: d.Priority,
		Variables: d.Variables, Category: d.Category, Tags: d.Tags, Checkpoint: d.Checkpoint, Artifacts: d.Artifacts}
	switch {
	case !templateID.MatchString(t.ID):
		return t, invalid("id", "%q is not a valid template id (letters, digits, . _ : -; at most 128)", t.ID)
	case t.Name == "":
		return t, invalid("name", "is required")
	case utf8.RuneCountInString(t.Name) > 255:
		return t, invalid("name", "is longer than 255 characters")
	case utf8.RuneCountInString(t.Description) > maxDescribing:
		return t, invalid("description", "is longer than %d characters", maxDescribing)
	case t.Timeout < 0 || t.Timeout > 7*86400:
		return t, invalid("timeout", "must be 0 (the default) to 604800 seconds")
	case t.Priority < 0 || t.Priority > 10:
		return t, invalid("priority", "must be 0 (the default) or 1 (highest) to 10")
	case utf8.RuneCountInString(t.Category) > 128:
		return t, invalid("category", "is longer than 128 characters")
	case len(t.Tags) > MaxTags:
		return t, invalid("tags", "has %d tags; at most %d", len(t.Tags), MaxTags)
	case len(t.Variables) > MaxVariables:
		return t, invalid("variables", "has %d variables; at most %d", len(t.Variables), MaxVariables)
	}
	// A template left without a timeout or priority shows the task API's
	// defaults, the values its tasks get, never 0, which is out of range.
	if t.Timeout == 0 {
		t.Timeout = task.DefaultTimeout
	}
	if t.Priority == 0 {
		t.Priority = task.DefaultPriority
	}
	declared := map[string]bool{}
	for i, v := range t.Variables {
		if err := checkVar(i, v, declared); err != nil {
			return t, err
		}
		declared[v.Name] = true
	}
	if err := eachTemplateString(t, func(field, s string) error {
		for _, name := range placeholders(s) {
			if !declared[name] {
				return invalid(field, "{{%s}} names no declared variable %q", name, name)
			}
		}
		return nil
	}); err != nil {
		return t, err
	}
	// The definition must make a valid task once its variables have values:
	// try it with a stand-in for each. The stand-in is an absolute path, so
	// that a workdir that is a variable's value ("{{dir}}") passes here; the
	// value given is checked with the task it makes.
	stand := map[string]string{}
	for _, v := range t.Variables {
		stand[v.Name] = "/x"
	}
	in, err := substitute(t, stand)
	if err != nil {
		return t, err
	}
	if _, err := task.NormalizeSpec(in); err != nil {
		return t, err
	}
	return t, nil
}

func checkVar(i int, v Var, declared map[string]bool) error {
	field := fmt.Sprintf("variables[%d]", i)
	switch {
	case !varName.MatchString(v.Name) || len(v.Name) > 64:
		return invalid(field+".name", "%q is not a variable name (letters, digits and _, not starting with a digit)", v.Name)
	case declared[v.Name]:
		return invalid(field+".name", "variable %q is declared twice", v.Name)
	case v.Type != VarString && v.Type != VarInt && v.Type != VarBool && v.Type != VarSelect:
		return invalid(field+".type", "variable %s: type must be string, int, bool or select, not %q", v.Name, v.Type)
	case v.Type == VarSelect && len(v.Options) == 0:
		return invalid(field+".options", "variable %s: a select needs its options", v.Name)
	case v.Type != VarSelect && len(v.Options) > 0:
		return invalid(field+".options", "variable %s: options are only for a select", v.Name)
	case len(v.Options) > MaxOptions:
		return invalid(field+".options", "variable %s: at most %d options", v.Name, MaxOptions)
	}
	if v.Default != "" {
		if _, err := v.value(v.Default); err != nil {
			return invalid(field+".default", "variable %s: the default %s", v.Name, err)
		}
	}
	return nil
}

// eachTemplateString calls f with every string variables may appear in,
// named as its field.
func eachTemplateString(t Template, f func(field, s string) error) error {
	if err := f("command", t.Command); err != nil {
		return err
	}
	for i, a := range t.Args {
		if err := f(fmt.Sprintf("args[%d]", i), a); err != nil {
			return err
		}
	}
	if err := f("workdir", t.Workdir); err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(t.Env))
	for _, k := range keys {
		if err := f("env."+k, t.Env[k]); err != nil {
			return err
		}
	}
	return nil
}

// placeholders returns the variable names s refers to, in order.
func placeholders(s string) []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// value checks one given value against the variable's type and returns it
// as the text substituted: strings as given, integers in decimal, booleans
// as true or false. raw is a string, a float64 (a JSON number) or a bool.
func (v Var) value(raw any) (string, error) {
	switch v.Type {
	case VarString:
		s, ok := raw.(string)
		if !ok {
			return "", fmt.Errorf("must be a string, not %s", kindOf(raw))
		}
		return s, nil
	case VarInt:
		switch x := raw.(type) {
		case float64:
			if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
				return "", fmt.Errorf("must be an integer, not %v", x)
			}
			return strconv.FormatInt(int64(x), 10), nil
		case string:
			n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
			if err != nil {
				return "", fmt.Errorf("must be an integer, not %q", x)
			}
			return strconv.FormatInt(n, 10), nil
		}
		return "", fmt.Errorf("must be an integer, not %s", kindOf(raw))
	case VarBool:
		switch x := raw.(type) {
		case bool:
			return strconv.FormatBool(x), nil
		case string:
			if x == "true" || x == "false" {
				return x, nil
			}
			return "", fmt.Errorf("must be true or false, not %q", x)
		}
		return "", fmt.Errorf("must be true or false, not %s", kindOf(raw))
	case VarSelect:
		s, ok := raw.(string)
		if !ok {
			return "", fmt.Errorf("must be one of %s, not %s", strings.Join(v.Options, ", "), kindOf(raw))
		}
		if !slices.Contains(v.Options, s) {
			return "", fmt.Errorf("must be one of %s, not %q", strings.Join(v.Options, ", "), s)
		}
		return s, nil
	}
	return "", fmt.Errorf("has unknown type %q", v.Type)
}

// kindOf names the JSON kind of a value a variable was given, for the
// error that refuses it: null, a string, a number, a boolean, an object,
// an array.
func kindOf(raw any) string {
	if raw == nil {
		return "null"
	}
	switch reflect.ValueOf(raw).Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	// Not a kind a JSON value has (a Go caller's own type).
	return "a value of another kind"
}

// Render makes the task the template describes with values for its
// variables (string, float64 or bool each): every value checked against
// its variable's type, then {{name}} replaced in command, args, workdir
// and env values. A value replaces its placeholder inside the one string
// that holds it, so an argument stays one argument whatever the value
// contains, and nothing is ever given to a shell (the task's type is
// shell: the command runs directly). Every problem is a *task.InvalidError
// naming the variable: an unknown one, a required one missing, a value of
// the wrong type, a select value outside its options.
func (t Template) Render(values map[string]any) (task.SpecInput, error) {
	declared := make(map[string]Var, len(t.Variables))
	for _, v := range t.Variables {
		declared[v.Name] = v
	}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if _, ok := declared[name]; !ok {
			return task.SpecInput{}, invalid("variables."+name, "the template has no variable %q", name)
		}
	}
	text := make(map[string]string, len(t.Variables))
	for _, v := range t.Variables {
		raw, given := values[v.Name]
		if !given || raw == nil {
			switch {
			case v.Default != "":
				raw = v.Default
			case v.Required:
				return task.SpecInput{}, invalid("variables."+v.Name, "variable %s is required", v.Name)
			default:
				text[v.Name] = "" // optional, no default: empty
				continue
			}
		}
		s, err := v.value(raw)
		if err != nil {
			return task.SpecInput{}, invalid("variables."+v.Name, "variable %s %s", v.Name, err)
		}
		if strings.ContainsRune(s, 0) {
			return task.SpecInput{}, invalid("variables."+v.Name, "variable %s contains a NUL byte", v.Name)
		}
		text[v.Name] = s
	}
	// Placeholders naming no variable cannot be stored (checkTemplate);
	// a template stored before its variables changed is checked again.
	if err := eachTemplateString(t, func(field, s string) error {
		for _, name := range placeholders(s) {
			if _, ok := declared[name]; !ok {
				return invalid("variables."+name, "%s has {{%s}}, which names no declared variable", field, name)
			}
		}
		return nil
	}); err != nil {
		return task.SpecInput{}, err
	}
	return substitute(t, text)
}

// substitute replaces the placeholders of t's strings with text and makes
// the task input: type shell (run directly), the template's timeout and
// priority when set. A command line without args is split into its words
// first (cmdline.Resolve), so that a value stays within the word that
// holds its placeholder, as it stays within its argument.
func substitute(t Template, text map[string]string) (task.SpecInput, error) {
	rep := func(s string) string {
		return placeholder.ReplaceAllStringFunc(s, func(m string) string {
			return text[placeholder.FindStringSubmatch(m)[1]]
		})
	}
	command, args, err := cmdline.Resolve(t.Command, t.Args)
	if err != nil {
		return task.SpecInput{}, invalid("command", "%v", err)
	}
	in := task.SpecInput{Name: t.Name, Type: task.TypeShell, Command: rep(command), Workdir: rep(t.Workdir),
		Checkpoint: &t.Checkpoint, Artifacts: t.Artifacts}
	if args != nil {
		in.Args = make([]string, len(args))
		for i, a := range args {
			in.Args[i] = rep(a)
		}
	}
	if t.Env != nil {
		in.Env = make(map[string]string, len(t.Env))
		for k, v := range t.Env {
			in.Env[k] = rep(v)
		}
	}
	if t.Timeout > 0 {
		timeout := t.Timeout
		in.Timeout = &timeout
	}
	if t.Priority > 0 {
		priority := t.Priority
		in.Priority = &priority
	}
	return in, nil
}
