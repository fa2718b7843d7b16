package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// MaxFuncLines is the most lines a function of an entry package may span,
// from its func keyword to its closing brace (its doc comment not
// counted).
const MaxFuncLines = 60

// LongFunc is a function longer than the limit.
type LongFunc struct {
	Pos   token.Position // where it starts
	Name  string         // the function's name, or "func literal"
	Lines int
}

func (f LongFunc) String() string {
	return fmt.Sprintf("%s:%d: %s is %d lines", f.Pos.Filename, f.Pos.Line, f.Name, f.Lines)
}

// LongFuncs returns the functions and function literals of the non-test
// Go files in dir that span more than limit lines, in file and line order.
// A literal is reported besides the function that holds it when it is too
// long by itself.
func LongFuncs(dir string, limit int) ([]LongFunc, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var long []LongFunc
	parsed := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		parsed++
		ast.Inspect(f, func(n ast.Node) bool {
			var name string
			var from, to token.Pos
			switch fn := n.(type) {
			case *ast.FuncDecl:
				if fn.Body == nil {
					return true
				}
				name, from, to = funcName(fn), fn.Pos(), fn.End()
			case *ast.FuncLit:
				name, from, to = "func literal", fn.Pos(), fn.End()
			default:
				return true
			}
			start, end := fset.Position(from), fset.Position(to)
			if lines := end.Line - start.Line + 1; lines > limit {
				long = append(long, LongFunc{Pos: start, Name: name, Lines: lines})
			}
			return true
		})
	}
	// An empty directory would pass silently: a package that moved must
	// make the caller update its list instead.
	if parsed == 0 {
		return nil, fmt.Errorf("%s holds no Go files", dir)
	}
	sort.Slice(long, func(i, j int) bool {
		a, b := long[i].Pos, long[j].Pos
		return a.Filename < b.Filename || a.Filename == b.Filename && a.Line < b.Line
	})
	return long, nil
}

// funcName is "Name" for a function and "Type.Name" for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch idx := t.(type) { // generic receivers
	case *ast.IndexExpr:
		t = idx.X
	case *ast.IndexListExpr:
		t = idx.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// RequireShortFuncs fails t for every function of the packages in dirs
// (directories relative to root) longer than MaxFuncLines, naming each
// with its position relative to root.
func RequireShortFuncs(t testing.TB, root string, dirs ...string) {
	t.Helper()
	var offenders []string
	for _, dir := range dirs {
		long, err := LongFuncs(filepath.Join(root, filepath.FromSlash(dir)), MaxFuncLines)
		if err != nil {
			t.Fatalf("%s: %v (a package moved? update the list of entry packages)", dir, err)
		}
		for _, f := range long {
			if rel, err := filepath.Rel(root, f.Pos.Filename); err == nil {
				f.Pos.Filename = rel
			}
			offenders = append(offenders, f.String())
		}
	}
	if len(offenders) > 0 {
		t.Errorf("functions of entry packages longer than %d lines (split them into named steps):\n\t%s",
			MaxFuncLines, strings.Join(offenders, "\n\t"))
	}
}
