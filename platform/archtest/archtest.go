// Package archtest checks rules about the shape of the code that no
// compiler enforces. Each module's tests call the checks that apply to it:
//
//   - Layers (RequireLayers): a package of an app layer (use cases) or a
//     ports layer (gRPC and HTTP servers) depends on the interfaces the app
//     layer declares, never on an adapter (Postgres, Kafka, gRPC clients,
//     …) that implements them; a domain package imports only the standard
//     library and other domain packages. The composition root — the
//     service's entry package — is what wires adapters into the use cases.
//     RequirePure holds a package that is pure without being named domain
//     to the same rule.
//   - Function length (RequireShortFuncs): entry points stay thin. The
//     taskmesh binary parses flags and calls one Run per subcommand, and
//     each service's entry package wires its parts together, so none of
//     their functions may grow past MaxFuncLines. Long wiring is where
//     cleanup chains get copied and goroutine errors get dropped; the limit
//     forces it into named steps.
//   - Documentation references (RequireDocRefs): a comment that points to
//     a page under docs/ names a page and heading that exist, so the
//     pointers survive pages being renamed or reorganised.
//
// Layers are read from import paths, below the path of the module that
// holds the package: a package with an "adapters" element is an adapter;
// otherwise one with an "app" or "ports" element belongs to those layers,
// and one with a "domain" element to the domain. So internal/app,
// internal/app/apptest, internal/video/ports, internal/admission/app and
// a gateway's top-level ports/rest are checked as app or ports packages,
// internal/adapters/postgres and internal/admission/adapters/tasks are
// adapters, and internal/domain/admitcore is domain.
//
// A service's test calls RequireLayers with its module directory:
//
//	func TestLayers(t *testing.T) { archtest.RequireLayers(t, ".") }
package archtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Violation is a package that reaches one it must not.
type Violation struct {
	Package string // the package that breaks the rule
	Reaches string // the package it must not reach
	// Chain is the imports from Package to Reaches, both included: the
	// first direct import to change.
	Chain []string
	Rule  Rule
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s %s (%s)", v.Package, v.Rule.verb(), v.Reaches, strings.Join(v.Chain, " → "))
}

// Rule is the rule a Violation breaks.
type Rule int

const (
	// NoAdapter: an app or ports package reaches no adapter, directly or
	// through other packages.
	NoAdapter Rule = iota
	// PureImports: a domain (or otherwise pure) package imports only the
	// standard library and other domain packages.
	PureImports
)

func (r Rule) verb() string {
	if r == PureImports {
		return "imports non-domain package"
	}
	return "imports adapter"
}

// Explain says what the rule asks and how to keep it.
func (r Rule) Explain() string {
	if r == PureImports {
		return "a domain package decides without I/O: it imports only the standard library and other domain packages (move the dependency behind an interface the app layer declares)"
	}
	return "an app or ports package must depend on interfaces it declares, not on an adapter"
}

// Layer is where a package sits, by its import path.
type Layer int

const (
	// Other is every package outside an app, ports, adapters or domain
	// layer (entry packages, platform, libraries, components of a module
	// organised otherwise).
	Other Layer = iota
	// App is a use-case or ports package: it must not reach an adapter.
	App
	// Adapter implements the interfaces an app layer declares.
	Adapter
	// Domain holds pure decisions: standard library and other domain
	// packages only.
	Domain
)

// LayerOf classifies the package importPath of the module modulePath by
// the path elements below the module's (see the package doc). A package
// outside the module, or the module's root package, is Other.
func LayerOf(modulePath, importPath string) Layer {
	rest, ok := strings.CutPrefix(importPath, modulePath+"/")
	if !ok || modulePath == "" {
		return Other
	}
	below := strings.Split(rest, "/")
	switch {
	case slices.Contains(below, "adapters"):
		return Adapter
	case slices.Contains(below, "app"), slices.Contains(below, "ports"):
		return App
	case slices.Contains(below, "domain"):
		return Domain
	}
	return Other
}

// listed is one package as `go list -json` describes it.
type listed struct {
	ImportPath string
	Dir        string
	Imports    []string
	Standard   bool
	DepOnly    bool // a dependency, not one of the module's packages
	Module     *struct{ Path string }
}

func (p listed) layer() Layer {
	if p.Module == nil {
		return Other
	}
	return LayerOf(p.Module.Path, p.ImportPath)
}

// graph is the packages of a module and everything they import.
type graph map[string]listed

// Violations lists, for the Go module in dir, every app or ports package
// of the module that imports an adapters package of the module, directly
// or through other packages of the module, and every domain package of
// the module that imports a package outside the standard library and the
// domain (test files are not looked at: a test may wire anything). It
// runs `go list`, so the go command must be on PATH; within a workspace
// (go.work), the workspace's modules are the ones resolved.
func Violations(ctx context.Context, dir string) ([]Violation, error) {
	pkgs, err := list(ctx, dir)
	if err != nil {
		return nil, err
	}
	g := make(graph, len(pkgs))
	for _, p := range pkgs {
		g[p.ImportPath] = p
	}
	var out []Violation
	for _, p := range pkgs {
		if p.DepOnly {
			continue
		}
		switch p.layer() {
		case App:
			out = append(out, g.adaptersReached(p.ImportPath)...)
		case Domain:
			out = append(out, g.impureImports(p.ImportPath, nil)...)
		}
	}
	sortViolations(out)
	return out, nil
}

// PureViolations lists the imports of the packages pkgs (directories
// relative to the module in dir, e.g. "internal/policy") that are neither
// in the standard library nor domain packages nor among pkgs. It is for a
// module organised by component rather than by layer, whose pure packages
// are not named domain. A directory that holds no package of the module
// is an error, so a moved package fails the check instead of passing it.
func PureViolations(ctx context.Context, dir string, pkgs ...string) ([]Violation, error) {
	all, err := list(ctx, dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	g := make(graph, len(all))
	byDir := make(map[string]string)
	for _, p := range all {
		g[p.ImportPath] = p
		if !p.DepOnly {
			byDir[p.Dir] = p.ImportPath
		}
	}
	var paths []string
	for _, rel := range pkgs {
		path, ok := byDir[filepath.Join(abs, filepath.FromSlash(rel))]
		if !ok {
			return nil, fmt.Errorf("archtest: %s holds no package of the module in %s", rel, dir)
		}
		paths = append(paths, path)
	}
	var out []Violation
	for _, path := range paths {
		out = append(out, g.impureImports(path, paths)...)
	}
	sortViolations(out)
	return out, nil
}

func sortViolations(vs []Violation) {
	slices.SortFunc(vs, func(a, b Violation) int {
		return strings.Compare(a.Package+" "+a.Reaches, b.Package+" "+b.Reaches)
	})
}

// adaptersReached walks the imports of from within its module breadth
// first, so each adapter reached is reported with a shortest chain. The
// walk stops at the module's edge: a package of another module is that
// module's public API (Go's internal rule keeps its adapters out of
// reach), and what it imports is for that module's own test to check.
func (g graph) adaptersReached(from string) []Violation {
	module := g[from].Module.Path
	prev := map[string]string{from: ""}
	queue := []string{from}
	var out []Violation
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, imp := range g[cur].Imports {
			if _, seen := prev[imp]; seen || g[imp].Module == nil || g[imp].Module.Path != module {
				continue
			}
			prev[imp] = cur
			if g[imp].layer() == Adapter {
				chain := []string{imp}
				for p := cur; p != ""; p = prev[p] {
					chain = append(chain, p)
				}
				slices.Reverse(chain)
				out = append(out, Violation{Package: from, Reaches: imp, Chain: chain, Rule: NoAdapter})
				continue // what the adapter imports is its own business
			}
			queue = append(queue, imp)
		}
	}
	return out
}

// impureImports reports the direct imports of path that are not standard,
// not domain and not in also. Direct imports suffice: whatever a non-pure
// import brings in is already reported through it.
func (g graph) impureImports(path string, also []string) []Violation {
	var out []Violation
	for _, imp := range g[path].Imports {
		if g[imp].Standard || g[imp].layer() == Domain || slices.Contains(also, imp) {
			continue
		}
		out = append(out, Violation{Package: path, Reaches: imp, Chain: []string{path, imp}, Rule: PureImports})
	}
	return out
}

func list(ctx context.Context, dir string) ([]listed, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("archtest: the go command is needed to list packages: %w", err)
	}
	cmd := exec.CommandContext(ctx, goCmd, "list", "-deps", "-json=ImportPath,Dir,Imports,Standard,DepOnly,Module", "./...")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("archtest: go list in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	var out []listed
	dec := json.NewDecoder(&stdout)
	for {
		var p listed
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("archtest: reading go list's output: %w", err)
		}
		out = append(out, p)
	}
}

// RequireLayers fails t for every violation in the module in dir, naming
// the chain of imports to cut.
func RequireLayers(t testing.TB, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vs, err := Violations(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	report(t, vs)
}

// RequirePure fails t for every import of the packages pkgs (directories
// relative to the module in dir) outside the standard library, the domain
// packages and pkgs themselves.
func RequirePure(t testing.TB, dir string, pkgs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vs, err := PureViolations(ctx, dir, pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	report(t, vs)
}

func report(t testing.TB, vs []Violation) {
	t.Helper()
	for _, v := range vs {
		t.Errorf("%s: %s", v, v.Rule.Explain())
	}
}
