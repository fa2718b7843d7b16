package executor_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor"
)

func TestAgentFileInTheDesignShapes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(`
# The command allow-list block, as the design writes it.
allowed_commands:
  - "python"
  - "bash"
  - "nvidia-smi"
blocked_patterns:
  - "rm -rf /"
  - "dd if="
isolation:
  enabled: true
  type: bwrap
  user: nobody
  readonly_paths: [/usr, /lib]
  writable_paths: [/tmp, /workspace]
log:
  max_size_mb: 100
  retain_count: 7
  local_dir: /var/log/taskmesh-agent
cleanup:
  local:
    max_age: 7d
    max_size: 10GB
  journal:
    max_age: 36h
`), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := executor.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg executor.Config
	if err := f.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if !s.Enabled || s.Type != "bwrap" || s.User != "nobody" || len(s.ReadonlyPaths) != 2 || s.WritablePaths[1] != "/workspace" {
		t.Errorf("sandbox = %+v", s)
	}
	if r := cfg.Retention; r.MaxAge != 7*24*time.Hour || r.MaxBytes != 10e9 || r.JournalMaxAge != 36*time.Hour {
		t.Errorf("retention = %+v", r)
	}
	if !slices.Equal(cfg.AllowedCommands, []string{"python", "bash", "nvidia-smi"}) || !slices.Equal(cfg.BlockedPatterns, []string{"rm -rf /", "dd if="}) {
		t.Errorf("allowed %q, blocked %q", cfg.AllowedCommands, cfg.BlockedPatterns)
	}
	if f.Log.MaxSizeMB != 100 || f.Log.RetainCount != 7 || f.Log.LocalDir != "/var/log/taskmesh-agent" {
		t.Errorf("log = %+v", f.Log)
	}
	for _, tc := range []struct{ bad, want string }{
		{"isolation: {enabeld: true}\n", `unknown field "enabeld"`},
		{"cleanup: {local: {max_age: soon}}\n", "cleanup.local.max_age"},
		{"cleanup: {local: {max_size: huge}}\n", "cleanup.local.max_size"},
		{"allowed_commands: [python, \"\"]\n", "allowed_commands[1]: is empty"},
		{"blocked_patterns: [\" \"]\n", "blocked_patterns[0]: is empty"},
		{"allowed_commands: python\n", "allowed_commands"},
		// The design's blocks of the server's settings say what sets them.
		{"agent: {server_url: \"http://server:8080\", poll_interval: 5s, batch_size: 10}\n", "agent: is not an agent setting: the agent's connection is set by flags: --server"},
		{"cleanup: {local: {max_age: 7d}, s3: {max_age: 30d, lifecycle_rule: true}}\n", "cleanup.s3: is not an agent setting"},
		{"storage: {s3: {bucket: results}}\n", "storage: is not an agent setting"},
		{"webhook: {url: \"https://example.com/webhook\"}\n", "webhook: is not an agent setting"},
		{"audit: {retention: 90d}\n", "audit: is not an agent setting"},
	} {
		if err := os.WriteFile(path, []byte(tc.bad), 0o600); err != nil {
			t.Fatal(err)
		}
		var cfg executor.Config
		f, err := executor.LoadFile(path)
		if err == nil {
			err = f.Apply(&cfg)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", strings.TrimSpace(tc.bad), err, tc.want)
		}
	}
}
