// Package archtest checks rules about the shape of the code that no
// compiler enforces. Its one rule today keeps entry points thin: the
// taskmesh binary parses flags and calls one Run per subcommand, and each
// service's entry package wires its parts together, so none of their
// functions may grow past MaxFuncLines. Long wiring is where cleanup
// chains get copied and goroutine errors get dropped; the limit forces it
// into named steps.
package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxFuncLines is the most lines a function of an entry package may span,
// from its func keyword to its closing brace (its doc comment not
// counted).
const MaxFuncLines = 60

// EntryPackages are the directories, relative to the repository root, of
// the taskmesh binary and of every service's entry package.
var EntryPackages = []string{
	"services/taskmesh/cmd/taskmesh",
	"services/taskmesh/internal/stack",
	"services/consumers",
	"services/scheduler",
	"services/quota",
	"services/quota/admission",
	"services/gateway",
	"services/executor",
}

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
	if idx, ok := t.(*ast.IndexExpr); ok { // generic receiver
		t = idx.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// RepoRoot is the directory holding go.work, searched from dir upwards.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory")
		}
		dir = parent
	}
}
