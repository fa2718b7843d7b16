package archtest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// Every reference to docs/ in the repository's Go and proto comments
// names a page, and a heading of it, that exist.
func TestRepositoryDocRefsResolve(t *testing.T) {
	root, err := archtest.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	archtest.RequireDocRefs(t, root)
}

// repo writes files (path → content) under a temporary directory.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const page = "# Task API\n\n## Leases, attempts and heartbeats\n\ntext\n\n" +
	"```sh\n# not a heading\n```\n\n### `taskmesh.task.v1.TaskService`\n\n" +
	"## The agent's loops\n\n## Errors\n\n## Errors\n\n<a id=\"legacy\"></a>\n"

func TestBrokenDocRefs(t *testing.T) {
	root := repo(t, map[string]string{
		"docs/api/tasks.md":        page,
		"docs/decisions/0001-x.md": "# X\n",
		"svc/good.go": "package svc\n\n" +
			"// See docs/api/tasks.md#leases-attempts-and-heartbeats.\n" +
			"// The service (docs/api/tasks.md#taskmeshtaskv1taskservice), the loops\n" +
			"// (docs/api/tasks.md#the-agents-loops), the second errors heading\n" +
			"// (docs/api/tasks.md#errors-1), an explicit anchor (docs/api/tasks.md#legacy),\n" +
			"// a page (docs/decisions/0001-x.md), a folder (docs/api/), a heading by\n" +
			"// name (docs/api/tasks.md, \"Leases, attempts and heartbeats\").\n" +
			"/* A block: docs/api/tasks.md#errors */\n" +
			"var s = \"docs/missing.md is in a string, not a comment\"\n" +
			"// services/x/docs/other.md is no reference to the repository's docs/.\n",
		"svc/bad.go": "package svc\n\n" +
			"// docs/api/quota.md does not exist.\n\n" +
			"// docs/api/tasks.md#no-such-heading\n" +
			"// docs/api/tasks.md#not-a-heading is inside a code fence\n" +
			"// docs/api/tasks.md, \"Leases\" is not a whole heading\n" +
			"// docs/api/#anchor names a heading of a folder\n",
		"proto/x/v1/x.proto":  "syntax = \"proto3\";\n\n// See docs/api/tasks.md#errors and docs/events.md.\n",
		"testdata/skipped.go": "package skipped\n\n// docs/skipped.md\n",
		".hidden/skipped.go":  "package skipped\n\n// docs/skipped.md\n",
	})
	broken, checked, err := archtest.BrokenDocRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range broken {
		got = append(got, r.String())
	}
	slices.Sort(got)
	want := []string{
		"proto/x/v1/x.proto:3: docs/events.md: no such file or directory",
		"svc/bad.go:3: docs/api/quota.md: no such file or directory",
		"svc/bad.go:5: docs/api/tasks.md#no-such-heading: the page has no heading with this anchor",
		"svc/bad.go:6: docs/api/tasks.md#not-a-heading: the page has no heading with this anchor",
		"svc/bad.go:7: docs/api/tasks.md#leases: the page has no heading with this anchor",
		"svc/bad.go:8: docs/api/#anchor: a heading can only be named on a Markdown page",
	}
	if !slices.Equal(got, want) {
		t.Errorf("broken references:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// good.go has 10 references (the last one is to docs/ itself), bad.go 5,
	// the proto 2.
	if checked != 17 {
		t.Errorf("checked %d references, want 17", checked)
	}
}

func TestRequireDocRefsFailsWhenItFindsNothing(t *testing.T) {
	root := repo(t, map[string]string{"svc/a.go": "package svc\n\n// No reference here.\n"})
	rec := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		archtest.RequireDocRefs(rec, root)
	}()
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "no comment") {
		t.Errorf("errors = %q, want a scan that found nothing reported", rec.errors)
	}
}
