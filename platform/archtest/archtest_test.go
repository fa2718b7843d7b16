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
	for _, tc := range []struct {
		path string
		want archtest.Layer
	}{
		{"example.com/svc/internal/app", archtest.App},
		{"example.com/svc/internal/app/apptest", archtest.App},
		{"example.com/svc/internal/ports", archtest.App},
		{"example.com/svc/internal/video/ports", archtest.App},
		{"example.com/svc/internal/admission/app", archtest.App},
		{"example.com/svc/internal/adapters/postgres", archtest.Adapter},
		{"example.com/svc/internal/admission/adapters/tasks", archtest.Adapter},
		{"example.com/svc/internal/adapters/app", archtest.Adapter},
		{"example.com/svc/internal/domain", archtest.Other},
		{"example.com/svc", archtest.Other},
		{"example.com/app/ports", archtest.Other}, // not below internal
		{"example.com/svc/internal/application", archtest.Other},
	} {
		if got := archtest.LayerOf(tc.path); got != tc.want {
			t.Errorf("LayerOf(%s) = %d, want %d", tc.path, got, tc.want)
		}
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
		".":                              {m + "internal/app", m + "internal/adapters/db"},
		"internal/domain":                {"strings"},
		"internal/app":                   {m + "internal/domain", "context"},
		"internal/app/apptest":           {m + "internal/app"},
		"internal/ports":                 {m + "internal/app", m + "internal/wire"},
		"internal/wire":                  {m + "internal/adapters/codec"},
		"internal/video/app":             {m + "internal/video/adapters/frames"},
		"internal/adapters/db":           {m + "internal/app", m + "internal/adapters/codec"},
		"internal/adapters/codec":        {m + "internal/domain"},
		"internal/video/adapters/frames": nil,
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
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
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
