package archtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// programPackages are programs tools/test-deps.sh looks for on PATH and
// the packages it names for them.
var programPackages = map[string]string{
	"pgbench": "postgresql-client", "kcat": "kcat", "redis-server": "redis-server", "bwrap": "bubblewrap",
	"ffmpeg": "ffmpeg", "fc-list": "fontconfig", "node": "nodejs", "npm": "npm", "chromium": "chromium",
	"scontrol": "slurm-client",
}

// runTestDeps runs tools/test-deps.sh with args under PATH=path and
// returns its exit code and standard error.
func runTestDeps(t *testing.T, path string, args ...string) (int, string) {
	t.Helper()
	root, err := RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, append([]string{filepath.Join(root, "tools", "test-deps.sh")}, args...)...)
	cmd.Env = []string{"PATH=" + path}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatal(err)
		return 0, ""
	}
}

// On a machine without the programs the tests run, `make test` stops
// before any test with the packages to install, and installs nothing
// under --check.
func TestTestDepsNamesWhatIsMissing(t *testing.T) {
	code, stderr := runTestDeps(t, t.TempDir(), "--check")
	if code != 1 {
		t.Fatalf("exit %d with nothing on PATH, want 1; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "apt-get install -y --no-install-recommends ") {
		t.Errorf("no install command in:\n%s", stderr)
	}
	named := namedPackages(stderr)
	for _, pkg := range programPackages {
		if !named[pkg] {
			t.Errorf("package %s not named in:\n%s", pkg, stderr)
		}
	}
}

// namedPackages are the packages the script's "lacks:" line names.
func namedPackages(stderr string) map[string]bool {
	named := map[string]bool{}
	for line := range strings.Lines(stderr) {
		if _, list, ok := strings.Cut(line, "lacks: "); ok {
			for _, p := range strings.Fields(list) {
				named[p] = true
			}
		}
	}
	return named
}

// A program found on PATH is not asked for.
func TestTestDepsFindsProgramsOnPath(t *testing.T) {
	dir := t.TempDir()
	for prog := range programPackages {
		if err := os.WriteFile(filepath.Join(dir, prog), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever else this machine lacks (a font, the server binaries, the
	// programs not planted here) may be named; these may not.
	_, stderr := runTestDeps(t, dir, "--check")
	named := namedPackages(stderr)
	for prog, pkg := range programPackages {
		if named[pkg] {
			t.Errorf("%s is on PATH but %s is named:\n%s", prog, pkg, stderr)
		}
	}
}

func TestTestDepsRefusesUnknownArguments(t *testing.T) {
	code, stderr := runTestDeps(t, t.TempDir(), "--install-everything")
	if code != 2 || !strings.Contains(stderr, "usage:") {
		t.Fatalf("exit %d, stderr %q; want 2 and the usage", code, stderr)
	}
}

// `make run` asks only for what Taskmesh itself runs, and starts without
// it: a machine without ffmpeg is told that video generations will wait,
// not stopped, and nothing the tests alone use is asked for.
func TestRunDepsNamesWhatTaskmeshRunsAndGoesOn(t *testing.T) {
	code, stderr := runTestDeps(t, t.TempDir(), "--run")
	if code != 0 {
		t.Fatalf("exit %d with nothing on PATH, want 0 (Taskmesh starts anyway); stderr:\n%s", code, stderr)
	}
	named := namedPackages(stderr)
	for _, pkg := range []string{"ffmpeg", "fontconfig"} {
		if !named[pkg] {
			t.Errorf("package %s not named in:\n%s", pkg, stderr)
		}
	}
	runs := map[string]bool{"postgresql": true, "ffmpeg": true, "fontconfig": true, "fonts-wqy-zenhei": true}
	for pkg := range named {
		if !runs[pkg] {
			t.Errorf("--run names %s, which only the tests use:\n%s", pkg, stderr)
		}
	}
	for _, want := range []string{"video generations: they wait QUEUED", "apt-get install -y --no-install-recommends "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
