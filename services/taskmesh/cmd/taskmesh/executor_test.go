package main

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestKeyValues(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{in: "premium=taskmesh-premium, standard=taskmesh-standard", want: map[string]string{"premium": "taskmesh-premium", "standard": "taskmesh-standard"}},
		{in: "", want: map[string]string{}},
		{in: "premium", wantErr: `"premium" is not queue=class`},
		{in: "=x", wantErr: `"=x" is not queue=class`},
		{in: "premium=", wantErr: `"premium=" is not queue=class`},
	}
	for _, tc := range tests {
		got, err := keyValues(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("keyValues(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("keyValues(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestExecutorRefusesAnUnknownBackend(t *testing.T) {
	cmd := executorCommand()
	cmd.SetArgs([]string{"--agent-id", "a", "--backend", "nomad"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--backend "nomad": want process, kubernetes or slurm`) {
		t.Fatalf("error %v", err)
	}
}

func TestExecutorConfigFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/agent.yaml"
	if err := os.WriteFile(file, []byte("isolation: {enabled: true, type: bwrap, user: nobody, writable_paths: [/data]}\n"+
		"log: {max_size_mb: 5, retain_count: 2, local_dir: "+dir+"/logs}\ncleanup: {local: {max_age: 3d, max_size: 2GB}}\n"+
		"allowed_commands: [python, bash]\nblocked_patterns: [\"rm -rf /\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := dir + "/token"
	if err := os.WriteFile(token, []byte("tma_x_y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var f executorFlags
	cmd := &cobra.Command{}
	f.addAgent(cmd.Flags())
	f.addIsolation(cmd.Flags())
	if err := cmd.Flags().Parse([]string{"--agent-id", "a", "--token-file", token, "--config", file,
		"--isolation-writable-paths", "/scratch", "--journal-max-age", "12h", "--blocked-patterns", "dd if=,mkfs",
		"--agent-lost-after", "1m"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if !s.Enabled || s.Type != "bwrap" || s.User != "nobody" || len(s.WritablePaths) != 1 || s.WritablePaths[0] != "/scratch" {
		t.Errorf("sandbox = %+v (the flag should win over the file)", s)
	}
	if r := cfg.Retention; r.MaxAge != 72*time.Hour || r.MaxBytes != 2e9 || r.JournalMaxAge != 12*time.Hour {
		t.Errorf("retention = %+v", r)
	}
	// The file's allow-list stands; the blocked patterns given as a flag win.
	if !slices.Equal(cfg.AllowedCommands, []string{"python", "bash"}) || !slices.Equal(cfg.BlockedPatterns, []string{"dd if=", "mkfs"}) {
		t.Errorf("allowed %q, blocked %q", cfg.AllowedCommands, cfg.BlockedPatterns)
	}
	if cfg.AgentLostAfter != time.Minute {
		t.Errorf("the scheduler's dead-agent timeout = %s, want 1m", cfg.AgentLostAfter)
	}
	if cfg.TokenFile != token || cfg.Token != "tma_x_y" {
		t.Errorf("token file %q, token set %v", cfg.TokenFile, cfg.Token != "")
	}
	if f.logFile.LocalDir != dir+"/logs" || f.logFile.MaxSizeMB != 5 || f.logFile.RetainCount != 2 {
		t.Errorf("log = %+v", f.logFile)
	}
	cfg.Logger.Info("hello")
	if b, err := os.ReadFile(dir + "/logs/agent.log"); err != nil || !strings.Contains(string(b), "hello") {
		t.Errorf("agent log file: %q, %v", b, err)
	}
}

// The Slurm backend's flags are checked before anything is dialled.
func TestExecutorSlurmFlagErrors(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--slurmrestd", "unix:/x", "--slurm-qos", "1-11=high"}, "--slurm-qos: \"1-11=high\": priorities are 1 to 10"},
		{[]string{"--slurmrestd", "unix:/x", "--slurm-node-agents", "node-a"}, "--slurm-node-agents: \"node-a\" is not node=address"},
		{[]string{"--slurmrestd", ""}, "--slurmrestd is required"},
		{[]string{"--slurmrestd", "slurm:6820"}, "want unix:/path or http(s)://host:port"},
		{[]string{"--slurmrestd", "unix:/x", "--slurm-start-signal", "10.0.0.2"}, `start signal address "10.0.0.2": want host:port`},
		{[]string{"--slurmrestd", "unix:/x", "--slurm-start-signal", ":7090", "--slurm-start-signal-addr", "ctl"}, `start signal address "ctl": want host:port`},
		{[]string{"--slurmrestd", "unix:/x", "--slurm-start-signal-addr", "ctl:7090"}, "--slurm-start-signal-addr needs --slurm-start-signal"},
		{[]string{"--slurmrestd", "unix:/x", "--slurm-mode", "batch", "--slurm-start-signal", ":7090", "--slurm-job-dir", "/tmp"}, "--slurm-start-signal is for placement mode"},
	}
	for _, tc := range tests {
		cmd := executorCommand()
		cmd.SetArgs(append([]string{"--agent-id", "a", "--backend", "slurm", "--data-dir", t.TempDir()}, tc.args...))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}
