package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/executor"
)

func TestAgentFileInTheDesignShapes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(`
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
	if f.Log.MaxSizeMB != 100 || f.Log.RetainCount != 7 || f.Log.LocalDir != "/var/log/taskmesh-agent" {
		t.Errorf("log = %+v", f.Log)
	}
	for _, bad := range []string{"isolation: {enabeld: true}\n", "cleanup: {local: {max_age: soon}}\n", "cleanup: {local: {max_size: huge}}\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := executor.LoadFile(path)
		if err == nil {
			err = f.Apply(&cfg)
		}
		if err == nil {
			t.Errorf("%q was accepted", strings.TrimSpace(bad))
		}
	}
}
