// Package archtest checks the layering every service follows: a package of
// an app layer (use cases) or a ports layer (gRPC servers) depends on the
// interfaces the app layer declares, never on an adapter (Postgres, Kafka,
// gRPC clients, …) that implements them. The composition root — the
// service's entry package — is what wires adapters into the use cases.
//
// Layers are read from import paths, below the module's "internal"
// directory: a package with an "adapters" element is an adapter; otherwise
// one with an "app" or "ports" element belongs to those layers. So
// internal/app, internal/app/apptest, internal/video/ports and
// internal/admission/app are checked, and internal/adapters/postgres and
// internal/admission/adapters/tasks are adapters.
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
	"slices"
	"strings"
	"testing"
	"time"
)

// Violation is an app or ports package that reaches an adapters package.
type Violation struct {
	Package string // the app or ports package
	Adapter string // the adapters package it reaches
	// Chain is the imports from Package to Adapter, both included: the
	// first direct import to change.
	Chain []string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s imports adapter %s (%s)", v.Package, v.Adapter, strings.Join(v.Chain, " → "))
}

// Layer is where a package sits, by its import path.
type Layer int

const (
	// Other is every package outside an app, ports or adapters layer
	// (domain, entry packages, platform, libraries).
	Other Layer = iota
	// App is a use-case or ports package: it must not reach an adapter.
	App
	// Adapter implements the interfaces an app layer declares.
	Adapter
)

// LayerOf classifies an import path (see the package doc).
func LayerOf(importPath string) Layer {
	elems := strings.Split(importPath, "/")
	i := slices.Index(elems, "internal")
	if i < 0 {
		return Other
	}
	below := elems[i+1:]
	switch {
	case slices.Contains(below, "adapters"):
		return Adapter
	case slices.Contains(below, "app"), slices.Contains(below, "ports"):
		return App
	}
	return Other
}

// listed is one package as `go list -json` describes it.
type listed struct {
	ImportPath string
	Imports    []string
	Standard   bool
	DepOnly    bool // a dependency, not one of the module's packages
}

// Violations lists, for the Go module in dir, every app or ports package
// of the module that imports an adapters package, directly or through
// other packages (test files are not looked at: a test may wire anything).
// It runs `go list`, so the go command must be on PATH; within a workspace
// (go.work), the workspace's modules are the ones resolved.
func Violations(ctx context.Context, dir string) ([]Violation, error) {
	pkgs, err := list(ctx, dir)
	if err != nil {
		return nil, err
	}
	byPath := make(map[string]listed, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var out []Violation
	for _, p := range pkgs {
		if p.DepOnly || LayerOf(p.ImportPath) != App {
			continue
		}
		out = append(out, adaptersReached(p.ImportPath, byPath)...)
	}
	slices.SortFunc(out, func(a, b Violation) int {
		return strings.Compare(a.Package+" "+a.Adapter, b.Package+" "+b.Adapter)
	})
	return out, nil
}

// adaptersReached walks the imports of from breadth first, so each
// adapter reached is reported with a shortest chain.
func adaptersReached(from string, byPath map[string]listed) []Violation {
	prev := map[string]string{from: ""}
	queue := []string{from}
	var out []Violation
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, imp := range byPath[cur].Imports {
			if _, seen := prev[imp]; seen || byPath[imp].Standard {
				continue
			}
			prev[imp] = cur
			if LayerOf(imp) == Adapter {
				chain := []string{imp}
				for p := cur; p != ""; p = prev[p] {
					chain = append(chain, p)
				}
				slices.Reverse(chain)
				out = append(out, Violation{Package: from, Adapter: imp, Chain: chain})
				continue // what the adapter imports is its own business
			}
			queue = append(queue, imp)
		}
	}
	return out
}

func list(ctx context.Context, dir string) ([]listed, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("archtest: the go command is needed to list packages: %w", err)
	}
	cmd := exec.CommandContext(ctx, goCmd, "list", "-deps", "-json=ImportPath,Imports,Standard,DepOnly", "./...")
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
	for _, v := range vs {
		t.Errorf("%s: an app or ports package must depend on interfaces it declares, not on an adapter", v)
	}
}
