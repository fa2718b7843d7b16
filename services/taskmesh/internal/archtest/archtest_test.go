package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// No function of the taskmesh binary or of a service's entry package is
// longer than MaxFuncLines.
func TestEntryPackagesHaveNoLongFunctions(t *testing.T) {
	root, err := RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	var offenders []string
	for _, pkg := range EntryPackages {
		long, err := LongFuncs(filepath.Join(root, pkg), MaxFuncLines)
		if err != nil {
			t.Fatalf("%s: %v (an entry package moved? update EntryPackages)", pkg, err)
		}
		for _, f := range long {
			f.Pos.Filename, _ = filepath.Rel(root, f.Pos.Filename)
			offenders = append(offenders, f.String())
		}
	}
	if len(offenders) > 0 {
		t.Errorf("functions of entry packages longer than %d lines (split them into named steps):\n\t%s",
			MaxFuncLines, strings.Join(offenders, "\n\t"))
	}
}

// The checker itself: the limit is inclusive, methods and literals are
// named, and test files do not count.
func TestLongFuncsMeasuresFromFuncToClosingBrace(t *testing.T) {
	dir := t.TempDir()
	body := func(lines int) string { return strings.Repeat("\t_ = 0\n", lines-2) }
	src := "package p\n\n" +
		"// fits is exactly at the limit.\nfunc fits() {\n" + body(5) + "}\n\n" +
		"func tooLong() {\n" + body(6) + "}\n\n" +
		"type T struct{}\n\nfunc (*T) method() {\n" + body(6) + "}\n\n" +
		"var literal = func() {\n" + body(6) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	test := "package p\n\nfunc TestLong() {\n" + body(20) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(test), 0o600); err != nil {
		t.Fatal(err)
	}
	long, err := LongFuncs(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range long {
		got = append(got, fmt.Sprintf("%s:%d:%d", f.Name, f.Pos.Line, f.Lines))
	}
	want := []string{"tooLong:10:6", "T.method:19:6", "func literal:26:6"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("LongFuncs = %v, want %v", got, want)
	}
	if _, err := LongFuncs(t.TempDir(), 5); err == nil {
		t.Error("a directory without Go files passed")
	}
}
