package main

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// entryPackages are the directories, relative to the repository root, of
// the taskmesh binary and of every service's entry package: the code that
// parses flags and wires parts together.
var entryPackages = []string{
	"services/taskmesh/cmd/taskmesh",
	"services/taskmesh/internal/stack",
	"services/consumers",
	"services/scheduler",
	"services/quota",
	"services/quota/admission",
	"services/gateway",
	"services/executor",
}

// No function of the taskmesh binary or of a service's entry package is
// longer than archtest.MaxFuncLines: flags are parsed here and each
// subcommand is one call to its service's Run.
func TestEntryPackagesHaveNoLongFunctions(t *testing.T) {
	root, err := archtest.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	archtest.RequireShortFuncs(t, root, entryPackages...)
}
