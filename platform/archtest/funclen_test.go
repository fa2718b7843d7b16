package archtest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The checker: the limit is inclusive, methods (generic ones too) and
// literals are named, and test files do not count.
func TestLongFuncsMeasuresFromFuncToClosingBrace(t *testing.T) {
	dir := t.TempDir()
	body := func(lines int) string { return strings.Repeat("\t_ = 0\n", lines-2) }
	src := "package p\n\n" +
		"// fits is exactly at the limit.\nfunc fits() {\n" + body(5) + "}\n\n" +
		"func tooLong() {\n" + body(6) + "}\n\n" +
		"type T struct{}\n\nfunc (*T) method() {\n" + body(6) + "}\n\n" +
		"var literal = func() {\n" + body(6) + "}\n\n" +
		"type G[K, V any] struct{}\n\nfunc (G[K, V]) generic() {\n" + body(6) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	test := "package p\n\nfunc TestLong() {\n" + body(20) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(test), 0o600); err != nil {
		t.Fatal(err)
	}
	long, err := archtest.LongFuncs(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range long {
		got = append(got, fmt.Sprintf("%s:%d:%d", f.Name, f.Pos.Line, f.Lines))
	}
	want := []string{"tooLong:10:6", "T.method:19:6", "func literal:26:6", "G.generic:35:6"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("LongFuncs = %v, want %v", got, want)
	}
	if _, err := archtest.LongFuncs(t.TempDir(), 5); err == nil {
		t.Error("a directory without Go files passed")
	}
}

// RequireShortFuncs names the offender relative to the root and fails on
// a directory that holds no Go file.
func TestRequireShortFuncs(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cmd", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "package main\n\nfunc main() {\n" + strings.Repeat("\t_ = 0\n", archtest.MaxFuncLines-1) + "}\n"
	if err := os.WriteFile(filepath.Join(root, "cmd", "x", "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{TB: t}
	archtest.RequireShortFuncs(rec, root, "cmd/x")
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "cmd/x/main.go:3: main is 61 lines") {
		t.Errorf("errors = %q, want cmd/x/main.go's main at 61 lines", rec.errors)
	}
	rec = &recorder{TB: t}
	func() {
		defer func() { _ = recover() }() // Fatalf stops the check, as on a real T
		archtest.RequireShortFuncs(rec, root, "cmd/moved")
	}()
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "cmd/moved") {
		t.Errorf("errors = %q, want the missing directory named", rec.errors)
	}
}

// recorder is a testing.TB that records failures instead of failing: the
// checks' own reports are what these tests look at.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic("fatal")
}

func (r *recorder) Fatal(args ...any) {
	r.errors = append(r.errors, fmt.Sprint(args...))
	panic("fatal")
}

func (r *recorder) Logf(string, ...any) {}
