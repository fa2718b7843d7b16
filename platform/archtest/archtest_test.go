package archtest_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

func TestLayerOf(t *testing.T) {
	const mod = "example.com/svc"
	for _, tc := range []struct {
		path string
		want archtest.Layer
	}{
		{"example.com/svc/internal/app", archtest.App},
		{"example.com/svc/internal/app/apptest", archtest.App},
		{"example.com/svc/internal/ports", archtest.App},
		{"example.com/svc/internal/video/ports", archtest.App},
		{"example.com/svc/internal/admission/app", archtest.App},
		{"example.com/svc/ports/rest", archtest.App}, // a top-level ports layer
		{"example.com/svc/internal/adapters/postgres", archtest.Adapter},
		{"example.com/svc/internal/admission/adapters/tasks", archtest.Adapter},
		{"example.com/svc/internal/adapters/app", archtest.Adapter},
		{"example.com/svc/internal/domain", archtest.Domain},
		{"example.com/svc/internal/domain/admitcore", archtest.Domain},
		{"example.com/svc/internal/video/domain", archtest.Domain},
		{"example.com/svc", archtest.Other},
		{"example.com/svc/internal/application", archtest.Other},
		{"example.com/svc/internal/agent", archtest.Other},
		{"example.com/app/ports", archtest.Other},  // another module
		{"example.com/svcx/ports", archtest.Other}, // a module whose path merely starts alike
	} {
		if got := archtest.LayerOf(mod, tc.path); got != tc.want {
			t.Errorf("LayerOf(%s, %s) = %d, want %d", mod, tc.path, got, tc.want)
		}
	}
	// Elements of the module's own path do not count.
	if got := archtest.LayerOf("example.com/app", "example.com/app/internal/store"); got != archtest.Other {
		t.Errorf("a module named app made its packages App: %d", got)
	}
}

// module writes a Go module named example.com/m into a temporary
// directory: pkgs maps each package's directory to the import paths of
// the packages it imports.
func module(t *testing.T, pkgs map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	for pkg, imports := range pkgs {
		var b strings.Builder
		name := filepath.Base(pkg)
		if pkg == "." {
			name = "m"
		}
		b.WriteString("package " + name + "\n\n")
		for _, imp := range imports {
			b.WriteString("import _ \"" + imp + "\"\n")
		}
		write(filepath.Join(pkg, "p.go"), b.String())
	}
	// A test file may wire adapters: it is not looked at.
	write("internal/app/app_test.go", "package app\n\nimport _ \"example.com/m/internal/adapters/db\"\n")
	return dir
}

func TestViolationsFindsAppAndPortsReachingAnAdapter(t *testing.T) {
	const m = "example.com/m/"
	dir := module(t, map[string][]string{
		".":                              {m + "internal/app", m + "internal/adapters/db", m + "ports/rest"},
		"internal/domain":                {"strings"},
		"internal/video/domain":          {m + "internal/domain", "time"},
		"internal/app":                   {m + "internal/domain", "context"},
		"internal/app/apptest":           {m + "internal/app"},
		"internal/ports":                 {m + "internal/app", m + "internal/wire"},
		"internal/wire":                  {m + "internal/adapters/codec"},
		"internal/video/app":             {m + "internal/video/adapters/frames"},
		"internal/adapters/db":           {m + "internal/app", m + "internal/adapters/codec"},
		"internal/adapters/codec":        {m + "internal/domain"},
		"internal/video/adapters/frames": nil,
		"ports/rest":                     {m + "internal/app", m + "internal/adapters/db"},
	})
	vs, err := archtest.Violations(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	want := []string{
		m + "internal/ports imports adapter " + m + "internal/adapters/codec (" +
			m + "internal/ports → " + m + "internal/wire → " + m + "internal/adapters/codec)",
		m + "internal/video/app imports adapter " + m + "internal/video/adapters/frames (" +
			m + "internal/video/app → " + m + "internal/video/adapters/frames)",
		m + "ports/rest imports adapter " + m + "internal/adapters/db (" +
			m + "ports/rest → " + m + "internal/adapters/db)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestViolationsFindsADomainPackageThatIsNotPure(t *testing.T) {
	const m = "example.com/m/"
	dir := module(t, map[string][]string{
		"internal/domain":       {"strings", m + "internal/wire"},
		"internal/video/domain": {m + "internal/domain"},
		"internal/wire":         {"example.com/m/internal/adapters/db"},
		"internal/adapters/db":  nil,
	})
	vs, err := archtest.Violations(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 {
		t.Fatalf("violations = %v, want the domain's import of internal/wire only", vs)
	}
	v := vs[0]
	if v.Package != m+"internal/domain" || v.Reaches != m+"internal/wire" || v.Rule != archtest.PureImports {
		t.Errorf("violation = %+v", v)
	}
	if !strings.Contains(v.Rule.Explain(), "standard library") {
		t.Errorf("the rule's explanation %q does not say what a domain may import", v.Rule.Explain())
	}
}

func TestPureViolations(t *testing.T) {
	const m = "example.com/m/"
	dir := module(t, map[string][]string{
		"internal/policy":       {"unicode/utf8", m + "internal/policy/rules"},
		"internal/policy/rules": {"strings"},
		"internal/journal":      {"database/sql", m + "internal/policy"},
		"internal/agent":        {m + "internal/journal", m + "internal/policy"},
	})
	ctx := context.Background()
	vs, err := archtest.PureViolations(ctx, dir, "internal/policy", "internal/policy/rules")
	if err != nil || len(vs) != 0 {
		t.Errorf("pure packages: violations = %v, %v", vs, err)
	}
	vs, err = archtest.PureViolations(ctx, dir, "internal/policy", "internal/journal")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.Package+" → "+v.Reaches)
	}
	want := []string{m + "internal/policy → " + m + "internal/policy/rules"}
	if !slices.Equal(got, want) {
		t.Errorf("violations = %v, want %v (journal imports only the standard library and policy)", got, want)
	}
	if _, err := archtest.PureViolations(ctx, dir, "internal/moved"); err == nil {
		t.Error("a directory without a package passed")
	}
}

// Another module's public package is that module's API: what it imports
// (here its own adapter) is not the importing module's layering.
func TestViolationsStopAtTheModulesEdge(t *testing.T) {
	lib := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":                       "module example.com/lib\n\ngo 1.22\n",
		"pub/pub.go":                   "package pub\n\nimport _ \"example.com/lib/internal/adapters/codec\"\n",
		"internal/adapters/codec/c.go": "package codec\n",
	} {
		path := filepath.Join(lib, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := module(t, map[string][]string{"internal/app": {"example.com/lib/pub"}})
	gomod := "module example.com/m\n\ngo 1.22\n\nrequire example.com/lib v0.0.0\n\nreplace example.com/lib => " + lib + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOWORK", "off") // the module stands alone, outside any workspace
	t.Setenv("GOFLAGS", "-mod=mod")
	vs, err := archtest.Violations(context.Background(), dir)
	if err != nil || len(vs) != 0 {
		t.Errorf("violations = %v, %v", vs, err)
	}
}

func TestViolationsOfACleanModule(t *testing.T) {
	const m = "example.com/m/"
	dir := module(t, map[string][]string{
		".":                    {m + "internal/ports", m + "internal/adapters/db"},
		"internal/app":         {"context"},
		"internal/ports":       {m + "internal/app"},
		"internal/adapters/db": {m + "internal/app"},
	})
	vs, err := archtest.Violations(context.Background(), dir)
	if err != nil || len(vs) != 0 {
		t.Errorf("violations = %v, %v", vs, err)
	}
}

func TestViolationsOfAModuleThatDoesNotBuild(t *testing.T) {
	dir := module(t, map[string][]string{"internal/app": {"example.com/m/internal/missing"}})
	if _, err := archtest.Violations(context.Background(), dir); err == nil {
		t.Error("a module whose imports cannot be resolved passed")
	}
}
